// CPU kernel of fused::rotary_embedding (Note [fused compute ops] in ops/fused/rotary_embedding.cpp):
// out = x * cos + rotate_half(x) * sin over the last dim, each product and the sum rounded to the
// dtype as aten::mul and aten::add round them (16-bit floats compute in float), so the result is
// bitwise the composition's. x, cos and sin are read through their strides (cos and sin broadcast
// to x's shape with stride 0), row by row along the last dim; out is written as planned.
#include "kernels/cpu/common.hpp"
#include "kernels/cpu/strided.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

// One element: the value of x's dtype T of (a * b), computed as aten::mul computes it.
template <typename T>
inline auto product(T a, T b) {
  using A = std::conditional_t<kIsHalf<T>, float, T>;
  return convert<T>(convert<A>(a) * convert<A>(b));
}

template <typename T>
void rotary_rows(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out) {
  using A = std::conditional_t<kIsHalf<T>, float, T>;
  const Shape& shape = x.shape();
  const size_t nd = shape.size();
  const int64_t d = shape[nd - 1], half = d / 2;
  const Strides cs = broadcast_strides(cos.shape(), cos.strides(), shape);
  const Strides ss = broadcast_strides(sin.shape(), sin.strides(), shape);
  const T* xp = x.data<T>();
  const T* cp = cos.data<T>();
  const T* sp = sin.data<T>();
  T* op = out.data<T>();
  const Strides os = out.strides();
  std::vector<int64_t> idx(nd, 0);  // the row's index over the leading dims (idx[nd-1] stays 0)
  const int64_t rows = d == 0 ? 0 : x.numel() / d;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t xo = 0, co = 0, so = 0, oo = 0;
    for (size_t k = 0; k + 1 < nd; ++k) {
      xo += idx[k] * x.strides()[k];
      co += idx[k] * cs[k];
      so += idx[k] * ss[k];
      oo += idx[k] * os[k];
    }
    const int64_t xs = x.strides()[nd - 1], cst = cs[nd - 1], sst = ss[nd - 1], ost = os[nd - 1];
    for (int64_t j = 0; j < d; ++j) {
      const T xj = xp[xo + j * xs];
      const T other = xp[xo + (j < half ? j + half : j - half) * xs];
      const T rot = j < half ? convert<T>(-convert<A>(other)) : other;  // negation is exact
      const T a = product(xj, cp[co + j * cst]);
      const T b = product(rot, sp[so + j * sst]);
      op[oo + j * ost] = convert<T>(convert<A>(a) + convert<A>(b));
    }
    for (size_t k = nd - 1; k-- > 0;) {  // the next row: an odometer over the leading dims
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
  }
}

void rotary_embedding(KernelCall& call) {
  const Tensor& x = call.arg("x").to_tensor();
  const Tensor& cos = call.arg("cos").to_tensor();
  const Tensor& sin = call.arg("sin").to_tensor();
  const Tensor& out = call.out(0);
  SF_CHECK(!may_overlap(out, x) && !may_overlap(out, cos) && !may_overlap(out, sin),
           "fused::rotary_embedding: the result overlaps an argument");
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloat<T>) {
      rotary_rows<T>(x, cos, sin, out);
    } else {
      invalid_usage("fused::rotary_embedding: {} is not a float", dtype_name(x.dtype()));
    }
  });
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(fused, cpu, m) { m.impl("rotary_embedding", rotary_embedding); }

}  // namespace symmflow::cpu
