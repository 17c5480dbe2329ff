// CPU kernels of the MoE routing ops (ops/aten/moe.cpp, meta_moe.hpp):
//  - topk, sort, sort.stable: per line, indices ordered by (key, index) (Note [sort order]) with
//    std::partial_sort (topk) or std::sort, values gathered by the order; 16-bit floats compare
//    in float (exactly).
//  - div.Tensor_mode / div.Scalar_mode: both operands converted to the result dtype, then computed
//    as PyTorch's CPU kernels do: floats in their accumulation type (float for bf16/f16, where a
//    Scalar divisor is taken in float, unrounded, as PyTorch's reduced-float path does), 'floor'
//    by c10::div_floor_floating, 'trunc' as trunc(a / b); integers in int64 with C truncation and
//    the floor correction, "ZeroDivisionError" on a zero divisor (as PyTorch), and INT_MIN / -1
//    wrapping to INT_MIN (PyTorch's CPU traps there).
//  - histc: PyTorch's linear binning in self's dtype (each step rounded to it, as c10's
//    BFloat16/Half arithmetic rounds), the last edge in the last bin, values outside [min, max]
//    and NaN ignored; counted in int64 and converted at the end (exact; PyTorch accumulates in
//    self's dtype, which saturates bf16 counts above 256).
//    Integer self: Note [integer histc].
//  - empty_permuted: the dispatcher allocated it.
//  - _grouped_mm: offs read on the host and checked (non-decreasing, <= S), one aten::mm.out per
//    non-empty group into its rows of the output, the rows past offs[G-1] zeroed.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "kernels/cpu/common.hpp"
#include "kernels/cpu/strided.hpp"
#include "ops/aten/meta_moe.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

using aten_meta::RoundingMode;

// ---- topk / sort --------------------------------------------------------------------------------

void sort_lines(const std::string& op, const Tensor& self, const aten_meta::SortInfo& info,
                const Tensor& values_out, const Tensor& indices_out) {
  Tensor x = as_dtype(self, self.dtype(), /*contiguous=*/true);
  Destination values(values_out, self.dtype(), /*need_contiguous=*/true);
  Destination indices(indices_out, DType::i64, /*need_contiguous=*/true);
  const int64_t n = info.n, k = info.k, inner = info.inner;
  const bool desc = info.descending;
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* in = static_cast<const T*>(x.raw_data());
    T* vo = static_cast<T*>(values.tensor().raw_data());
    auto* io = static_cast<int64_t*>(indices.tensor().raw_data());
    std::vector<A> keys(static_cast<size_t>(n));
    std::vector<int64_t> order(static_cast<size_t>(n));
    // Note [sort order]: (key, index), NaN above every number.
    auto before = [&](int64_t a, int64_t b) {
      const A p = keys[size_t(a)], q = keys[size_t(b)];
      if constexpr (kIsFloat<T>) {
        const bool pn = std::isnan(p), qn = std::isnan(q);
        if (pn || qn) return pn && qn ? a < b : (desc ? pn : qn);
      }
      if (p != q) return desc ? q < p : p < q;
      return a < b;
    };
    for (int64_t o = 0; o < info.outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = o * n * inner + i;
        for (int64_t j = 0; j < n; ++j) keys[size_t(j)] = A(in[base + j * inner]);
        std::iota(order.begin(), order.end(), int64_t(0));
        if (k < n) {
          std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
        } else {
          std::sort(order.begin(), order.end(), before);  // a total order: stable
        }
        const int64_t out_base = o * k * inner + i;
        for (int64_t j = 0; j < k; ++j) {
          vo[out_base + j * inner] = in[base + order[size_t(j)] * inner];
          io[out_base + j * inner] = order[size_t(j)];
        }
      }
    }
  });
  values.finish();
  indices.finish();
}

void topk_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  aten_meta::SortInfo info = aten_meta::topk_info(call.op.name(), self, call.arg("k"),
                                                  call.arg("dim"), call.arg("largest"));
  sort_lines(call.op.name(), self, info, call.out(0), call.out(1));
}

void sort_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  aten_meta::SortInfo info =
      aten_meta::sort_info(call.op.name(), self, call.arg("dim"), call.arg("descending"));
  sort_lines(call.op.name(), self, info, call.out(0), call.out(1));
}

// ---- div with a rounding mode -------------------------------------------------------------------

// c10::div_floor_floating.
template <typename A>
A div_floor_float(A a, A b) {
  if (b == A(0)) return a / b;
  const A mod = std::fmod(a, b);
  A div = (a - mod) / b;
  if (mod != A(0) && (b < A(0)) != (mod < A(0))) div -= A(1);
  if (div == A(0)) return std::copysign(A(0), a / b);
  A floordiv = std::floor(div);
  if (div - floordiv > A(0.5)) floordiv += A(1);
  return floordiv;
}

// a / b truncated (floor: rounded down), wrapping INT_MIN / -1; b != 0.
inline int64_t div_int(int64_t a, int64_t b, bool floor) {
  if (b == -1) return int64_t(uint64_t(0) - uint64_t(a));
  int64_t q = a / b;
  if (floor && a % b != 0 && ((a % b < 0) != (b < 0))) --q;
  return q;
}

void div_mode_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  const Value& other = call.arg("other");
  aten_meta::DivModeInfo info =
      aten_meta::div_mode_info(op, self, other, call.arg("rounding_mode"));
  const DType dtype = info.spec.dtype;
  const Tensor& out = call.out(0);
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      // The compute type: the accumulation type of floats, int64 for integers.
      using A = std::conditional_t<kIsFloat<T>, acc_t<T>, int64_t>;
      constexpr DType kA = dtype_of<A>;
      Tensor a = as_dtype(as_dtype(self, dtype), kA);
      Tensor b;
      if (other.is_tensor()) {
        b = as_dtype(as_dtype(other.to_tensor(), dtype), kA);
      } else if constexpr (kIsFloat<T>) {
        b = Tensor::empty({}, kA);  // a Scalar in the compute type, unrounded to a 16-bit dtype
        fill(b, other);
      } else {
        b = Tensor::empty({}, dtype);  // an integer Scalar wraps to the result dtype first
        fill(b, other);
        b = as_dtype(b, kA);
      }
      const Shape& shape = out.shape();
      StridedLoop<3> loop = make_loop<3>(
          shape, {out.strides(), broadcast_strides(a.shape(), a.strides(), shape),
                  broadcast_strides(b.shape(), b.strides(), shape)});
      T* o = static_cast<T*>(out.raw_data());
      const A* x = static_cast<const A*>(a.raw_data());
      const A* y = static_cast<const A*>(b.raw_data());
      const RoundingMode mode = info.mode;
      for_each_row(loop, [&](const std::array<int64_t, 3>& off, const std::array<int64_t, 3>& st,
                             int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const A p = x[off[1] + i * st[1]], q = y[off[2] + i * st[2]];
          A r;
          if constexpr (kIsFloat<T>) {
            r = mode == RoundingMode::floor   ? div_floor_float(p, q)
                : mode == RoundingMode::trunc ? std::trunc(p / q)
                                              : p / q;
          } else {
            SF_CHECK(q != 0, "{}: ZeroDivisionError (integer division by zero)", op);
            r = div_int(p, q, mode == RoundingMode::floor);
          }
          o[off[0] + i * st[0]] = convert<T>(r);
        }
      });
    }
  });
}

// ---- histc --------------------------------------------------------------------------------------

// Note [integer histc]
// PyTorch's CPU histc takes floats only, its CUDA histc integers too, and transformers' MoE layers
// pass their expert ids as int32 on GPUs (as float on the CPU). symmflow takes integers on both, as
// CUDA computes them: min and max truncated to self's dtype (the data's own range when they are
// equal), widened by one each way when still equal, then bin = (v - min) * bins / (max - min) in
// int64 with truncating division, a value at max in the last bin, values outside [min, max]
// ignored; counts in self's dtype.
template <typename T>
void histc_integers(const std::string& op, const T* in, int64_t count,
                    const aten_meta::HistcInfo& info, T* out) {
  double lo = info.min, hi = info.max;
  if (info.from_data) {
    const auto [mn, mx] = std::minmax_element(in, in + count);
    lo = double(*mn);
    hi = double(*mx);
  }
  aten_meta::histc_final_range(op, lo, hi);
  const int64_t left = int64_t(lo), right = int64_t(hi);
  std::vector<int64_t> counts(size_t(info.bins), 0);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t v = int64_t(in[i]);
    if (v < left || v > right) continue;
    const int64_t pos = std::min((v - left) * info.bins / (right - left), info.bins - 1);
    ++counts[size_t(pos)];
  }
  for (int64_t j = 0; j < info.bins; ++j) out[j] = T(counts[size_t(j)]);
}

void histc_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  aten_meta::HistcInfo info =
      aten_meta::histc_info(op, self, call.arg("bins"), call.arg("min"), call.arg("max"));
  Tensor x = as_dtype(self, self.dtype(), /*contiguous=*/true);
  Destination out(call.out(0), self.dtype(), /*need_contiguous=*/true);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloat<T>) {
      using A = acc_t<T>;
      const T* in = static_cast<const T*>(x.raw_data());
      const int64_t count = x.numel();
      double lo = info.min, hi = info.max;
      if (info.from_data) {  // aminmax: NaN propagates (and is then refused as not finite)
        lo = hi = double(A(in[0]));
        for (int64_t i = 1; i < count && !std::isnan(lo); ++i) {
          const double v = double(A(in[i]));
          if (std::isnan(v)) {
            lo = hi = v;
            break;
          }
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
      }
      aten_meta::histc_final_range(op, lo, hi);
      auto round = [](A v) { return A(T(v)); };  // one step of arithmetic in T
      const A left = round(A(lo)), right = round(A(hi));
      const A bins = round(A(info.bins));
      const A width = round(right - left);
      std::vector<int64_t> counts(size_t(info.bins), 0);
      for (int64_t i = 0; i < count; ++i) {
        const A v = A(in[i]);
        if (!(v >= left && v <= right)) continue;
        int64_t pos = int64_t(round(round(round(v - left) * bins) / width));
        pos = std::clamp<int64_t>(pos, 0, info.bins - 1);  // the last edge is in the last bin
        ++counts[size_t(pos)];
      }
      T* o = static_cast<T*>(out.tensor().raw_data());
      for (int64_t j = 0; j < info.bins; ++j) o[j] = T(A(counts[size_t(j)]));
    } else if constexpr (!std::is_same_v<T, bool>) {
      histc_integers(op, static_cast<const T*>(x.raw_data()), x.numel(), info,
                     static_cast<T*>(out.tensor().raw_data()));
    }
  });
  out.finish();
}

// ---- _grouped_mm --------------------------------------------------------------------------------

void grouped_mm_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  const Tensor& mat2 = call.arg("mat2").to_tensor();
  aten_meta::GroupedMmInfo info = aten_meta::grouped_mm_info(
      op, self, mat2, call.arg("offs"), call.arg("bias"), call.arg("out_dtype"));
  Tensor offs = as_dtype(call.arg("offs").to_tensor(), DType::i64, /*contiguous=*/true);
  const auto* ends_p = static_cast<const int64_t*>(offs.raw_data());
  std::vector<int64_t> ends(ends_p, ends_p + info.groups);
  aten_meta::check_grouped_mm_offsets(op, ends, info.rows);
  Destination dst(call.out(0), info.spec.dtype, /*need_contiguous=*/true);
  const Tensor& out = dst.tensor();
  const int64_t n = info.n;
  int64_t start = 0;
  for (int64_t g = 0; g < info.groups; ++g) {
    const int64_t end = ends[size_t(g)];
    if (end > start) {
      Tensor a = self.as_strided({end - start, info.k}, self.strides(), start * self.strides()[0]);
      Tensor b = mat2.as_strided({info.k, n}, {mat2.strides()[1], mat2.strides()[2]},
                                 g * mat2.strides()[0]);
      Tensor o = out.as_strided({end - start, n}, {n, 1}, start * n);
      symmflow::call("aten::mm.out", {a, b}, {{"out", o}});
    }
    start = end;
  }
  const int64_t tail = info.rows - start;
  if (tail > 0) fill(out.as_strided({tail, n}, {n, 1}, start * n), Value(int64_t(0)));
  dst.finish();
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cpu, m) {
  m.impl("topk", topk_kernel);
  m.impl("sort", sort_kernel);
  m.impl("sort.stable", sort_kernel);
  m.impl("div.Tensor_mode", div_mode_kernel);
  m.impl("div.Scalar_mode", div_mode_kernel);
  m.impl("histc", histc_kernel);
  m.impl("empty_permuted", [](KernelCall&) {});  // the dispatcher allocated it
  m.impl("_grouped_mm", grouped_mm_kernel);
}

}  // namespace symmflow::cpu
