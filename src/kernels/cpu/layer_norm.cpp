// CPU kernel of aten::native_layer_norm: three results (out, mean, rstd; meta_multi.hpp), over a
// contiguous copy of the input seen as [rows, inner]. Per row, in the accumulation type (float for
// f32/bf16/f16, double for f64): mean = sum(x) / n, then var = sum((x - mean)^2) / n (two passes,
// no cancellation), rstd = 1 / sqrt(var + eps), out = (x - mean) * rstd * weight + bias. A row of
// no element has mean 0 and rstd NaN, as PyTorch gives.
#include <cmath>
#include <limits>

#include "kernels/cpu/common.hpp"
#include "ops/aten/meta_multi.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

template <typename T>
void layer_norm_rows(const T* x, const std::vector<acc_t<T>>& w, const std::vector<acc_t<T>>& b,
                     T* y, acc_t<T>* mean, acc_t<T>* rstd, int64_t rows, int64_t n, double eps) {
  using A = acc_t<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict xr = x + r * n;
    T* __restrict yr = y + r * n;
    if (n == 0) {
      mean[r] = A(0);
      rstd[r] = std::numeric_limits<A>::quiet_NaN();
      continue;
    }
    A sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += A(xr[j]);
    const A mu = sum / A(n);
    A ss = 0;
    for (int64_t j = 0; j < n; ++j) {
      const A d = A(xr[j]) - mu;
      ss += d * d;
    }
    const A rs = A(1) / std::sqrt(ss / A(n) + A(eps));
    mean[r] = mu;
    rstd[r] = rs;
    for (int64_t j = 0; j < n; ++j) {
      A v = (A(xr[j]) - mu) * rs;
      if (!w.empty()) v = v * w[size_t(j)];
      if (!b.empty()) v = v + b[size_t(j)];
      yr[j] = T(v);
    }
  }
}

// The optional tensor argument `name` as `inner` contiguous values of A, or empty when None.
template <typename A>
std::vector<A> affine(const KernelCall& call, const char* name, int64_t inner) {
  std::optional<Tensor> t = call.arg(name).to_optional_tensor();
  if (!t) return {};
  Tensor c = as_dtype(*t, dtype_of<A>, /*contiguous=*/true);
  const A* p = static_cast<const A*>(c.raw_data());
  return std::vector<A>(p, p + inner);
}

void native_layer_norm_kernel(KernelCall& call) {
  const Tensor& input = call.arg("input").to_tensor();
  aten_meta::LayerNormInfo info = aten_meta::layer_norm_info(
      call.op.name(), input, call.arg("normalized_shape"), call.arg("weight"), call.arg("bias"),
      call.arg("eps"));
  Tensor x = as_dtype(input, input.dtype(), /*contiguous=*/true);
  visit_dtype(input.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloat<T>) {
      using A = acc_t<T>;
      std::vector<A> w = affine<A>(call, "weight", info.inner);
      std::vector<A> b = affine<A>(call, "bias", info.inner);
      Destination y(call.out(0), input.dtype(), /*need_contiguous=*/true);
      Destination mean(call.out(1), dtype_of<A>, /*need_contiguous=*/true);
      Destination rstd(call.out(2), dtype_of<A>, /*need_contiguous=*/true);
      layer_norm_rows<T>(static_cast<const T*>(x.raw_data()), w, b,
                         static_cast<T*>(y.tensor().raw_data()),
                         static_cast<A*>(mean.tensor().raw_data()),
                         static_cast<A*>(rstd.tensor().raw_data()), info.rows, info.inner,
                         info.eps);
      y.finish();
      mean.finish();
      rstd.finish();
    }
  });
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cpu, m) { m.impl("native_layer_norm", native_layer_norm_kernel); }

}  // namespace symmflow::cpu
