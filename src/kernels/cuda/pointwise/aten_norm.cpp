// cuda kernels of aten::sum.dim_IntList, mean.dim, amax, rms_norm, native_layer_norm, _softmax and
// _log_softmax (+ out), on the row kernels of norm.cu. A sum or mean over adjacent dims of a
// contiguous input with a kept dim after them runs in place (Note [column sums] in norm.cu); other
// inputs that are not contiguous are first copied contiguous (sum/mean/amax: with the kept dims
// first and the reduced dims last, so each output is one row); 16-bit floats accumulate in float.
// Floating dtypes only, like the other GPU arithmetic, except sum's integer results (Note [integer
// sums on GPUs]).
#include <optional>

#include "kernels/cuda/pointwise/norm.hpp"
#include "kernels/cuda/pointwise/program.hpp"
#include "kernels/families.hpp"
#include "ops/aten/meta.hpp"
#include "ops/aten/meta_multi.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

Tensor contiguous_on_gpu(const Tensor& t) { return t.is_contiguous() ? t : aten::clone(t); }

// `self` with the kept dims first and the reduced dims last, contiguous (each output is one row):
// itself when it already is (a reduction over the last dims of a contiguous tensor, the common
// case: nothing is allocated, so it can run inside a CUDA graph capture), else a copy.
Tensor kept_then_reduced(const Tensor& self, const aten_meta::ReduceInfo& info) {
  Shape shape;
  Strides strides;
  for (int pass = 0; pass < 2; ++pass) {  // kept dims, then reduced dims
    for (size_t d = 0; d < size_t(self.dim()); ++d) {
      if (info.reduced[d] != (pass == 1)) continue;
      shape.push_back(self.shape()[d]);
      strides.push_back(self.strides()[d]);
    }
  }
  Tensor rows = self.as_strided(shape, strides, 0);
  return rows.is_contiguous() ? rows : aten::clone(rows);
}

// `self` as [outer, rows, cols] summed over rows with cols > 1, when it is contiguous and its
// reduced dims of more than one element are adjacent with a kept one after them (Note [column
// sums] in norm.cu); nullopt otherwise (a reduction over the last dims is a row sum).
struct ColumnView {
  int64_t outer = 1, rows = 1, cols = 1;
};
std::optional<ColumnView> column_view(const Tensor& self, const aten_meta::ReduceInfo& info) {
  if (!self.is_contiguous()) return std::nullopt;
  ColumnView v;
  int phase = 0;  // 0: kept dims before, 1: reduced dims, 2: kept dims after
  for (size_t d = 0; d < size_t(self.dim()); ++d) {
    const int64_t n = self.shape()[d];
    if (n == 1) continue;
    if (info.reduced[d]) {
      if (phase == 2) return std::nullopt;
      phase = 1;
      v.rows *= n;
    } else if (phase == 0) {
      v.outer *= n;
    } else {
      phase = 2;
      v.cols *= n;
    }
  }
  if (phase != 2) return std::nullopt;
  return v;
}

void rms_norm_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& input = call.arg("input").to_tensor();
  aten_meta::RmsNormInfo info = aten_meta::rms_norm_info(
      op, input, call.arg("normalized_shape"), call.arg("weight"), call.arg("eps"));
  check_float(op, input.dtype());
  Tensor x = contiguous_on_gpu(input);
  std::optional<Tensor> weight = call.arg("weight").to_optional_tensor();
  Tensor w = weight ? contiguous_on_gpu(*weight) : Tensor();
  const Tensor& out = call.out(0);
  const int64_t rows = info.inner == 0 ? 0 : input.numel() / info.inner;
  SF_CUDA_CHECK(cudaError_t(launch_rms_norm(
      x.raw_data(), pw_type(x.dtype()), weight ? w.raw_data() : nullptr,
      weight ? pw_type(w.dtype()) : PwType::f32, out.raw_data(), pw_type(out.dtype()), rows,
      info.inner, info.eps, current_stream())));
}

// Three results (Note [list returns] in schema.hpp has the count rules): out, mean, rstd. The
// dispatcher allocates them contiguous; a planned buffer is contiguous too.
void native_layer_norm_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& input = call.arg("input").to_tensor();
  aten_meta::LayerNormInfo info =
      aten_meta::layer_norm_info(op, input, call.arg("normalized_shape"), call.arg("weight"),
                                 call.arg("bias"), call.arg("eps"));
  check_float(op, input.dtype());
  Tensor x = contiguous_on_gpu(input);
  std::optional<Tensor> weight = call.arg("weight").to_optional_tensor();
  std::optional<Tensor> bias = call.arg("bias").to_optional_tensor();
  Tensor w = weight ? contiguous_on_gpu(*weight) : Tensor();
  Tensor b = bias ? contiguous_on_gpu(*bias) : Tensor();
  for (size_t r = 0; r < 3; ++r) {
    SF_CHECK(call.out(r).is_contiguous(), "{}: result {} must be contiguous", op, r);
  }
  SF_CUDA_CHECK(cudaError_t(launch_layer_norm(
      x.raw_data(), pw_type(x.dtype()), weight ? w.raw_data() : nullptr,
      weight ? pw_type(w.dtype()) : PwType::f32, bias ? b.raw_data() : nullptr,
      bias ? pw_type(b.dtype()) : PwType::f32, call.out(0).raw_data(), call.out(1).raw_data(),
      call.out(2).raw_data(), info.rows, info.inner, info.eps, current_stream())));
}

// Note [integer sums on GPUs]: sum.dim_IntList (+ .IntList_out) of bool and integer tensors, as
// transformers' masks and position ids take it (attention_mask.sum(-1)), runs on the row-sum kernel
// with int64 accumulation when the result dtype is an integer one (i64 by default, as PyTorch
// promotes bool, i8, i32 and i64): exact, wrapping like the CPU kernel. A float result of an
// integer input accumulates in float, as for float inputs. A bool result, and mean (PyTorch
// refuses integer means), stay refused.
std::string sum_dtypes(const OpDef& op, std::span<const Value> args) {
  // The result's dtype, or the written `out`'s for .IntList_out (which returns nothing).
  const DType d = op.schema().returns.empty()
                      ? args[size_t(op.aliases().written_args.at(0))].to_tensor().dtype()
                      : op.shape_fn()(args).at(0).dtype;
  if (is_floating(d) || d == DType::i64 || d == DType::i32 || d == DType::i8 || d == DType::u32)
    return "";
  return fmt::format("{}: dtype {} has no cuda kernel (f32, bf16, f16, f64; sums also i64, i32, "
                     "i8, u32)",
                     op.name(), dtype_name(d));
}

Kernel reduce_kernel(bool is_mean, bool out_variant) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const Tensor& self = call.arg("self").to_tensor();
    aten_meta::ReduceInfo info = aten_meta::reduce_info(op, self, call.arg("dim"),
                                                        call.arg("keepdim"), call.arg("dtype"),
                                                        is_mean);
    if (is_mean) check_float(op, self.dtype());
    if (is_mean || info.spec.dtype == DType::boolean) check_float(op, info.spec.dtype);
    const Tensor& dst = out_variant ? call.arg("out").to_tensor() : call.out(0);
    if (out_variant) aten_meta::check_out(op, "out", dst, info.spec, /*exact_dtype=*/true);
    Tensor y = dst.is_contiguous()
                   ? dst
                   : Tensor::uninitialized(dst.shape(), dst.dtype(), dst.device());
    if (std::optional<ColumnView> v = column_view(self, info)) {  // Note [column sums]
      const PwType xt = pw_type(self.dtype()), yt = pw_type(y.dtype());
      const int64_t bytes = col_sum_workspace_bytes(v->outer, v->rows, v->cols, xt, yt);
      Tensor work = bytes > 0 ? Tensor::uninitialized({(bytes + 7) / 8}, DType::f64, self.device())
                              : Tensor();
      SF_CUDA_CHECK(cudaError_t(launch_col_sum(self.raw_data(), xt, y.raw_data(), yt, v->outer,
                                               v->rows, v->cols, is_mean,
                                               bytes > 0 ? work.raw_data() : nullptr,
                                               current_stream())));
    } else {
      Tensor x = kept_then_reduced(self, info);
      SF_CUDA_CHECK(cudaError_t(launch_row_sum(x.raw_data(), pw_type(x.dtype()), y.raw_data(),
                                               pw_type(y.dtype()), y.numel(), info.count, is_mean,
                                               current_stream())));
    }
    if (y.raw_data() != dst.raw_data()) aten::copy_(dst, y);
  };
}

void amax_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  aten_meta::ReduceInfo info = aten_meta::amax_info(op, self, call.arg("dim"), call.arg("keepdim"));
  check_float(op, self.dtype());
  const Tensor& dst = call.out(0);
  Tensor x = kept_then_reduced(self, info);
  Tensor y = dst.is_contiguous() ? dst
                                 : Tensor::uninitialized(dst.shape(), dst.dtype(), dst.device());
  SF_CUDA_CHECK(cudaError_t(launch_row_max(x.raw_data(), pw_type(x.dtype()), y.raw_data(),
                                           pw_type(y.dtype()), y.numel(), info.count,
                                           current_stream())));
  if (y.raw_data() != dst.raw_data()) aten::copy_(dst, y);
}

Kernel softmax_kernel(bool log, bool out_variant) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const Tensor& self = call.arg("self").to_tensor();
    aten_meta::SoftmaxInfo info =
        aten_meta::softmax_info(op, self, call.arg("dim"), call.arg("half_to_float"));
    check_float(op, self.dtype());
    const Tensor& dst = out_variant ? call.arg("out").to_tensor() : call.out(0);
    if (out_variant) aten_meta::check_out(op, "out", dst, info.spec, /*exact_dtype=*/true);
    Tensor x = contiguous_on_gpu(self);
    const int64_t outer = info.outer, n = info.n, inner = info.inner;
    Tensor y = dst.is_contiguous()
                   ? dst
                   : Tensor::uninitialized(dst.shape(), dst.dtype(), dst.device());
    SF_CUDA_CHECK(cudaError_t(launch_softmax(x.raw_data(), pw_type(x.dtype()), y.raw_data(),
                                             pw_type(y.dtype()), outer, n, inner, log,
                                             current_stream())));
    if (y.raw_data() != dst.raw_data()) aten::copy_(dst, y);
  };
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cuda, m) {
  kernels::register_reduction_kernels(m, reduce_kernel, rms_norm_kernel, softmax_kernel,
                                      float_only);
  for (const char* sum : {"sum.dim_IntList", "sum.IntList_out"}) m.kernel_check(sum, sum_dtypes);
  m.impl("amax", amax_kernel);
  m.impl("native_layer_norm", native_layer_norm_kernel);
  m.kernel_check("amax", float_only);
  m.kernel_check("native_layer_norm", float_only);
}

}  // namespace symmflow::cuda
