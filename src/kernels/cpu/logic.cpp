// CPU kernels of the comparisons and bitwise ops (ops/aten/logic.cpp): eq/ne/lt/le/gt/ge in both
// overloads and bitwise_and/or/xor/not. Both operands are first converted to the op's compute
// type (the comparison's result_type; the bitwise result type), a Scalar to a 0-dim tensor of it,
// then one typed strided loop runs (16-bit floats compare in float, exactly). So comparisons are
// exact for every dtype, 64-bit integers included, and -inf/inf/NaN Scalars compare as in
// PyTorch (NaN is unequal to everything). Bitwise ops on bool are logical (~true is false).
#include "kernels/cpu/common.hpp"
#include "kernels/cpu/strided.hpp"
#include "ops/aten/meta.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

enum class Cmp { eq, ne, lt, le, gt, ge };
enum class Bit { band, bor, bxor, bnot };

// out[i] = f(a[i], b[i]) over out's shape; a and b hold T and broadcast to it, out holds Out.
template <typename Out, typename T, typename F>
void binary_map(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  const Shape& shape = out.shape();
  StridedLoop<3> loop = make_loop<3>(
      shape, {out.strides(), broadcast_strides(a.shape(), a.strides(), shape),
              broadcast_strides(b.shape(), b.strides(), shape)});
  Out* o = static_cast<Out*>(out.raw_data());
  const T* x = static_cast<const T*>(a.raw_data());
  const T* y = static_cast<const T*>(b.raw_data());
  for_each_row(loop, [&](const std::array<int64_t, 3>& off, const std::array<int64_t, 3>& st,
                         int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      o[off[0] + i * st[0]] = f(x[off[1] + i * st[1]], y[off[2] + i * st[2]]);
    }
  });
}

// `other` (a tensor or a Scalar) in `dtype`: a converted tensor, or a 0-dim tensor of the Scalar.
Tensor operand_as(const Value& other, DType dtype) {
  if (other.is_tensor()) return as_dtype(other.to_tensor(), dtype);
  Tensor t = Tensor::empty({}, dtype);
  fill(t, other);
  return t;
}

template <Cmp K, typename A>
bool compare(A x, A y) {
  if constexpr (K == Cmp::eq) return x == y;
  if constexpr (K == Cmp::ne) return x != y;
  if constexpr (K == Cmp::lt) return x < y;
  if constexpr (K == Cmp::le) return x <= y;
  if constexpr (K == Cmp::gt) return x > y;
  if constexpr (K == Cmp::ge) return x >= y;
}

template <Cmp K>
void compare_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  const Value& other = call.arg("other");
  aten_meta::CompareInfo info = aten_meta::compare_info(call.op.name(), self, other);
  Tensor a = as_dtype(self, info.compute), b = operand_as(other, info.compute);
  visit_dtype(info.compute, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    binary_map<bool, T>(call.out(0), a, b, [](T x, T y) { return compare<K>(A(x), A(y)); });
  });
}

template <Bit K, typename T>
T bitwise(T x, T y) {
  if constexpr (std::is_same_v<T, bool>) {
    if constexpr (K == Bit::band) return x && y;
    if constexpr (K == Bit::bor) return x || y;
    if constexpr (K == Bit::bxor) return x != y;
    if constexpr (K == Bit::bnot) return !x;
  } else {
    if constexpr (K == Bit::band) return T(x & y);
    if constexpr (K == Bit::bor) return T(x | y);
    if constexpr (K == Bit::bxor) return T(x ^ y);
    if constexpr (K == Bit::bnot) return T(~x);
  }
}

template <Bit K>
void bitwise_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  Value other;
  if constexpr (K != Bit::bnot) other = call.arg("other");
  TensorSpec spec = aten_meta::bitwise_spec(call.op.name(), self, other);
  Tensor a = as_dtype(self, spec.dtype);
  Tensor b = K == Bit::bnot ? a : operand_as(other, spec.dtype);
  visit_dtype(spec.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsInt<T> || std::is_same_v<T, bool>) {
      binary_map<T, T>(call.out(0), a, b, [](T x, T y) { return bitwise<K>(x, y); });
    }
  });
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cpu, m) {
  for (const char* overload : {".Tensor", ".Scalar"}) {
    const std::string o = overload;
    m.impl("eq" + o, compare_kernel<Cmp::eq>);
    m.impl("ne" + o, compare_kernel<Cmp::ne>);
    m.impl("lt" + o, compare_kernel<Cmp::lt>);
    m.impl("le" + o, compare_kernel<Cmp::le>);
    m.impl("gt" + o, compare_kernel<Cmp::gt>);
    m.impl("ge" + o, compare_kernel<Cmp::ge>);
    m.impl("bitwise_and" + o, bitwise_kernel<Bit::band>);
    m.impl("bitwise_or" + o, bitwise_kernel<Bit::bor>);
  }
  m.impl("bitwise_xor.Tensor", bitwise_kernel<Bit::bxor>);
  m.impl("bitwise_not", bitwise_kernel<Bit::bnot>);
}

}  // namespace symmflow::cpu
