// cpu kernels of symm_mem::fused_all_reduce_add_rms_norm and its _out variant (Note [fused
// all-reduce add rms_norm] in src/ops/symm_mem/defs.cpp):
//   residual_out = all_reduce(input) + residual;  out = rms_norm(residual_out, [N], weight, eps)
//
// Contract: every rank of the group calls it with the same shapes. The all-reduce is the one-shot
// of all_reduce.cpp (rank order, so every rank gets the same bits), reduced straight into
// residual_out's buffer; then each row adds the residual and rounds to the dtype (as
// aten::add.Tensor), sums the squares of that row in order in acc_t (f32 for bf16 and f16, f64 for
// f64), and stores summed * (1 / sqrt(mean + eps)) * weight rounded once (as aten::rms_norm). So
// the result is bitwise the composition of the three cpu kernels, on every rank.
// Expects: `input` contiguous in symmetric memory of the group; any layout for the others.
// Refuses (InvalidUsage naming the op and argument, before any communication): a non-floating
//   dtype, a 0-dim input, residual / weight / outputs of the wrong dtype or shape, outputs that
//   overlap each other or an argument, and everything the one-shot refuses (group, reduce_op,
//   symmetric input).
// Allocates only a strided output's temp, a strided residual's contiguous copy and the weight in
// acc_t (N elements; none for a contiguous f32 or f64 weight).
#include <cmath>
#include <utility>

#include "kernels/cpu/collectives/one_shot.hpp"
#include "kernels/cpu/common.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

constexpr std::string_view kFused = "symm_mem::fused_all_reduce_add_rms_norm";
constexpr std::string_view kFusedOut = "symm_mem::fused_all_reduce_add_rms_norm_out";

// Byte range [lo, hi) of the elements of t.
std::pair<const char*, const char*> bytes_of(const Tensor& t) {
  const char* base = static_cast<const char*>(t.raw_data());
  if (t.numel() == 0) return {base, base};
  int64_t lo = 0, hi = 0;
  for (size_t d = 0; d < t.shape().size(); ++d) {
    int64_t reach = (t.shape()[d] - 1) * t.strides()[d];
    (reach < 0 ? lo : hi) += reach;
  }
  const int64_t elem = int64_t(dtype_size(t.dtype()));
  return {base + lo * elem, base + (hi + 1) * elem};
}

void check_apart(std::string_view op, std::string_view written, const Tensor& w,
                 std::string_view other_name, const Tensor& other) {
  auto [a_lo, a_hi] = bytes_of(w);
  auto [b_lo, b_hi] = bytes_of(other);
  SF_CHECK(!(a_lo < b_hi && b_lo < a_hi),
           "{}: output '{}' overlaps argument '{}' in memory; the op writes '{}' while it still "
           "reads '{}', so they must be separate buffers",
           op, written, other_name, written, other_name);
}

// residual_out (holding the reduced sum) += residual, rounded; out = rms_norm of it. Both
// contiguous [rows, n]; residual contiguous; w the weight in acc_t (n elements).
template <typename T>
void add_rms_norm_rows(T* residual_out, const T* residual, const acc_t<T>* w, T* out,
                       int64_t rows, int64_t n, double eps) {
  using A = acc_t<T>;
  for (int64_t r = 0; r < rows; ++r) {
    T* __restrict s = residual_out + r * n;
    const T* __restrict res = residual + r * n;
    T* __restrict y = out + r * n;
    A squares = 0;
    for (int64_t j = 0; j < n; ++j) {
      s[j] = T(A(s[j]) + A(res[j]));
      squares += A(s[j]) * A(s[j]);
    }
    const A scale = A(1) / std::sqrt(squares / A(n) + A(eps));
    for (int64_t j = 0; j < n; ++j) y[j] = T(A(s[j]) * scale * w[j]);
  }
}

void fused_impl(std::string_view op, const Tensor& input, const Tensor& residual,
                const Tensor& weight, double eps, const KernelCall& c, size_t reduce_arg,
                const Tensor& out, const Tensor& residual_out) {
  const DType dtype = input.dtype();
  SF_CHECK(is_floating(dtype),
           "{}: argument 'input' is {}; the op normalizes, so it needs a floating dtype (f32, "
           "bf16, f16, f64)",
           op, input.str());
  SF_CHECK(input.dim() >= 1, "{}: argument 'input' ({}) needs at least one dim to normalize over",
           op, input.str());
  const int64_t n = input.shape().back();
  check_spec(op, "residual", residual, dtype, input.shape(), "like 'input'");
  check_spec(op, "weight", weight, dtype, Shape{n}, "the last dim of 'input'");
  check_spec(op, "out", out, dtype, input.shape(), "like 'input'");
  check_spec(op, "residual_out", residual_out, dtype, input.shape(), "like 'input'");
  for (const auto& [name, t] : {std::pair<std::string_view, const Tensor*>{"input", &input},
                                {"residual", &residual},
                                {"weight", &weight},
                                {"residual_out", &residual_out}}) {
    check_apart(op, "out", out, name, *t);
    if (name != "residual_out") check_apart(op, "residual_out", residual_out, name, *t);
  }
  // Note [prepared collectives] (args.hpp); the group is the argument after the reduce op.
  Reduction red = call_reduction(c, op, reduce_arg, reduce_arg + 1, dtype);
  SymmArg in(input, op, "input", *red.group);
  const Tensor res = residual.is_contiguous() ? residual : residual.contiguous();
  OutBuffer summed(residual_out);
  OutBuffer normed(out);
  one_shot(op, red, in, input.numel(), summed.data());
  const int64_t rows = n == 0 ? 0 : input.numel() / n;
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloat<T>) {
      const Tensor w = as_dtype(weight, dtype_of<acc_t<T>>, /*contiguous=*/true);
      add_rms_norm_rows<T>(static_cast<T*>(summed.data()), static_cast<const T*>(res.raw_data()),
                           static_cast<const acc_t<T>*>(w.raw_data()),
                           static_cast<T*>(normed.data()), rows, n, eps);
    }
  });
  summed.finish();
  normed.finish();
}

SYMMFLOW_LIBRARY_IMPL(symm_mem, cpu, m) {
  m.impl("fused_all_reduce_add_rms_norm", [](KernelCall& c) {
    fused_impl(kFused, c.arg(0).to_tensor(), c.arg(1).to_tensor(), c.arg(2).to_tensor(),
               c.arg(3).to_double(), c, 4, c.out(0), c.out(1));
  });
  m.impl("fused_all_reduce_add_rms_norm_out", [](KernelCall& c) {
    fused_impl(kFusedOut, c.arg(0).to_tensor(), c.arg(1).to_tensor(), c.arg(2).to_tensor(),
               c.arg(3).to_double(), c, 4, c.arg(6).to_tensor(), c.arg(7).to_tensor());
  });
}

}  // namespace
}  // namespace symmflow::cpu
