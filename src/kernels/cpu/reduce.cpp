// CPU kernels of aten::sum.dim_IntList, mean.dim (+ their out variants), amax, rms_norm,
// _softmax and _log_softmax (+ out; x - max - log(sum of exp(x - max)) for the latter). amax keeps the dtype and propagates NaN. Accumulation is in float for
// f32/f16/bf16, double for f64, and wrapping int64 for integers. sum/mean iterate the input once
// with a stride-0 accumulator along the reduced dims (rows along a reduced dim are summed in 8
// independent lanes first); rms_norm and _softmax work on a contiguous copy laid out as [outer, n,
// inner]. Empty reductions give 0 (sum) and NaN (mean).
#include <cmath>
#include <limits>

#include "kernels/cpu/common.hpp"
#include "kernels/cpu/vector_math.hpp"
#include "kernels/cpu/strided.hpp"
#include "kernels/families.hpp"
#include "ops/aten/meta.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

template <typename T>
using SumAcc = std::conditional_t<kIsFloat<T>, acc_t<T>, int64_t>;

template <typename Acc, typename T>
inline Acc acc_add(Acc a, T v) {
  if constexpr (std::is_integral_v<Acc>) {
    return Acc(uint64_t(a) + uint64_t(int64_t(v)));
  } else {
    return a + Acc(v);
  }
}

// acc[keepdim index] += in[...] over the whole input.
template <typename T>
void sum_into(std::vector<SumAcc<T>>& acc, const Tensor& in, const aten_meta::ReduceInfo& info) {
  using Acc = SumAcc<T>;
  Strides acc_strides = contiguous_strides(info.keepdim_shape);
  for (size_t d = 0; d < acc_strides.size(); ++d) {
    if (info.reduced[d]) acc_strides[d] = 0;
  }
  StridedLoop<2> loop = make_loop<2>(in.shape(), {acc_strides, in.strides()});
  const T* base = static_cast<const T*>(in.raw_data());
  Acc* acc_base = acc.data();
  for_each_row(loop, [&](const auto& off, const auto& step, int64_t n) {
    const T* __restrict x = base + off[1];
    Acc* __restrict a = acc_base + off[0];
    if (step[0] == 0) {  // a row along reduced dims: lane sums, then one update
      Acc lanes[8] = {};
      int64_t i = 0;
      if (step[1] == 1) {
        for (; i + 8 <= n; i += 8) {
          for (int l = 0; l < 8; ++l) lanes[l] = acc_add(lanes[l], x[i + l]);
        }
      }
      for (; i < n; ++i) lanes[i % 8] = acc_add(lanes[i % 8], x[i * step[1]]);
      Acc total = *a;
      for (Acc l : lanes) total = acc_add(total, l);
      *a = total;
    } else {
      for (int64_t i = 0; i < n; ++i) a[i * step[0]] = acc_add(a[i * step[0]], x[i * step[1]]);
    }
  });
}

Kernel reduce_kernel(bool is_mean, bool out_variant) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const Tensor& self = call.arg("self").to_tensor();
    aten_meta::ReduceInfo info = aten_meta::reduce_info(op, self, call.arg("dim"),
                                                        call.arg("keepdim"), call.arg("dtype"),
                                                        is_mean);
    const Tensor& dst = out_variant ? call.arg("out").to_tensor() : call.out(0);
    if (out_variant) aten_meta::check_out(op, "out", dst, info.spec, /*exact_dtype=*/true);
    Tensor in = as_dtype(self, info.spec.dtype);
    Destination d(dst, info.spec.dtype, /*need_contiguous=*/true);
    visit_dtype(info.spec.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Acc = SumAcc<T>;
      std::vector<Acc> acc(size_t(numel(info.keepdim_shape)), Acc(0));
      sum_into<T>(acc, in, info);
      T* o = static_cast<T*>(d.tensor().raw_data());
      for (size_t i = 0; i < acc.size(); ++i) {
        if constexpr (kIsFloat<T>) {
          o[i] = is_mean ? T(acc[i] / Acc(info.count)) : T(acc[i]);
        } else {
          o[i] = convert<T>(acc[i]);
        }
      }
    });
    d.finish();
  };
}

// ---- amax ------------------------------------------------------------------------------------

// The larger of a and b; NaN wins (PyTorch's amax propagates NaN).
template <typename A>
inline A max_nan(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (std::isnan(b)) return b;
  }
  return b > a ? b : a;
}

void amax_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  aten_meta::ReduceInfo info =
      aten_meta::amax_info(call.op.name(), self, call.arg("dim"), call.arg("keepdim"));
  Destination d(call.out(0), info.spec.dtype, /*need_contiguous=*/true);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      using A = std::conditional_t<kIsFloat<T>, acc_t<T>, T>;
      std::vector<A> acc(size_t(numel(info.keepdim_shape)), std::numeric_limits<A>::lowest());
      if constexpr (kIsFloat<T>) {
        std::fill(acc.begin(), acc.end(), -std::numeric_limits<A>::infinity());
      }
      Strides acc_strides = contiguous_strides(info.keepdim_shape);
      for (size_t k = 0; k < acc_strides.size(); ++k) {
        if (info.reduced[k]) acc_strides[k] = 0;
      }
      StridedLoop<2> loop = make_loop<2>(self.shape(), {acc_strides, self.strides()});
      const T* base = static_cast<const T*>(self.raw_data());
      for_each_row(loop, [&](const auto& off, const auto& step, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          A& a = acc[size_t(off[0] + i * step[0])];
          a = max_nan(a, A(base[off[1] + i * step[1]]));
        }
      });
      T* o = static_cast<T*>(d.tensor().raw_data());
      for (size_t i = 0; i < acc.size(); ++i) o[i] = T(acc[i]);
    }
  });
  d.finish();
}

// ---- rms_norm -------------------------------------------------------------------------------

// y[r, j] = x[r, j] / sqrt(mean_j(x^2) + eps) * w[j]; x contiguous T, y contiguous O.
template <typename T, typename O>
void rms_norm_rows(const T* x, const std::vector<acc_t<T>>& w, O* y, int64_t rows, int64_t n,
                   double eps) {
  using A = acc_t<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict xr = x + r * n;
    O* __restrict yr = y + r * n;
    A ss = 0;
    for (int64_t j = 0; j < n; ++j) ss += A(xr[j]) * A(xr[j]);
    A scale = A(1) / std::sqrt(ss / A(n) + A(eps));
    if (w.empty()) {
      for (int64_t j = 0; j < n; ++j) yr[j] = O(A(xr[j]) * scale);
    } else {
      for (int64_t j = 0; j < n; ++j) yr[j] = O(A(xr[j]) * scale * w[size_t(j)]);
    }
  }
}

void rms_norm_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& input = call.arg("input").to_tensor();
  aten_meta::RmsNormInfo info = aten_meta::rms_norm_info(
      op, input, call.arg("normalized_shape"), call.arg("weight"), call.arg("eps"));
  Tensor x = as_dtype(input, input.dtype(), /*contiguous=*/true);
  std::optional<Tensor> weight = call.arg("weight").to_optional_tensor();
  int64_t rows = info.inner == 0 ? 0 : input.numel() / info.inner;
  visit_dtype(input.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloat<T>) {
      using A = acc_t<T>;
      std::vector<A> w;
      if (weight) {
        Tensor wa = as_dtype(*weight, dtype_of<A>, /*contiguous=*/true);
        const A* p = static_cast<const A*>(wa.raw_data());
        w.assign(p, p + info.inner);
      }
      // Write T directly when the result has the input's dtype, else A then convert once.
      DType compute = info.spec.dtype == input.dtype() ? input.dtype() : dtype_of<A>;
      Destination d(call.out(0), compute, /*need_contiguous=*/true);
      const T* xp = static_cast<const T*>(x.raw_data());
      if (compute == input.dtype()) {
        rms_norm_rows<T, T>(xp, w, static_cast<T*>(d.tensor().raw_data()), rows, info.inner,
                            info.eps);
      } else {
        rms_norm_rows<T, A>(xp, w, static_cast<A*>(d.tensor().raw_data()), rows, info.inner,
                            info.eps);
      }
      d.finish();
    }
  });
}

// ---- _softmax -------------------------------------------------------------------------------

// Softmax (log_softmax when `log`) along the middle dim of a contiguous [outer, n, inner] block.
template <typename T, typename O>
void softmax_block(const T* x, O* y, int64_t outer, int64_t n, int64_t inner, bool log) {
  using A = acc_t<T>;
  std::vector<A> mx(static_cast<size_t>(inner));
  std::vector<A> sum(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o) {
    const T* xo = x + o * n * inner;
    O* yo = y + o * n * inner;
    std::fill(mx.begin(), mx.end(), -std::numeric_limits<A>::infinity());
    std::fill(sum.begin(), sum.end(), A(0));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < inner; ++j) mx[size_t(j)] = std::max(mx[size_t(j)], A(xo[i * inner + j]));
    }
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < inner; ++j) sum[size_t(j)] += vexp(A(xo[i * inner + j]) - mx[size_t(j)]);
    }
    if (log) {
      for (int64_t j = 0; j < inner; ++j) sum[size_t(j)] = std::log(sum[size_t(j)]);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < inner; ++j)
          yo[i * inner + j] = O(A(xo[i * inner + j]) - mx[size_t(j)] - sum[size_t(j)]);
      }
      continue;
    }
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < inner; ++j) {
        yo[i * inner + j] = O(vexp(A(xo[i * inner + j]) - mx[size_t(j)]) / sum[size_t(j)]);
      }
    }
  }
}

Kernel softmax_kernel(bool log, bool out_variant) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const Tensor& self = call.arg("self").to_tensor();
    aten_meta::SoftmaxInfo info =
        aten_meta::softmax_info(op, self, call.arg("dim"), call.arg("half_to_float"));
    const Tensor& dst = out_variant ? call.arg("out").to_tensor() : call.out(0);
    if (out_variant) aten_meta::check_out(op, "out", dst, info.spec, /*exact_dtype=*/true);
    Tensor x = as_dtype(self, self.dtype(), /*contiguous=*/true);
    const int64_t outer = info.outer, n = info.n, inner = info.inner;
    Destination d(dst, info.spec.dtype, /*need_contiguous=*/true);
    visit_dtype(self.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (kIsFloat<T>) {
        const T* xp = static_cast<const T*>(x.raw_data());
        if (info.spec.dtype == self.dtype()) {
          softmax_block<T, T>(xp, static_cast<T*>(d.tensor().raw_data()), outer, n, inner, log);
        } else {
          softmax_block<T, float>(xp, static_cast<float*>(d.tensor().raw_data()), outer, n, inner,
                                 log);
        }
      }
    });
    d.finish();
  };
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cpu, m) {
  kernels::register_reduction_kernels(m, reduce_kernel, rms_norm_kernel, softmax_kernel);
  m.impl("amax", amax_kernel);
}

}  // namespace symmflow::cpu
