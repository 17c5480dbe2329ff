// Example plugin: myops::fused_allreduce_rmsnorm, the pattern at the end of every tensor-parallel
// block: all-reduce the partial sums, add the residual, RMS-normalise.
//
//   out, residual_out = rms_norm(all_reduce(input) + residual, weight, eps)
//
// `input` must live in symmetric memory (register_symm_mem_args), so the compiler allocates the
// matmul that produces it straight in the group's heap. The CPU kernel composes registered ops;
// on GPUs (when built with the cuda backend) the op is one kernel of symmflow_cuda. The compiler
// also rewrites the written-out pattern into this op when the plugin is loaded (pass
// fuse_allreduce_rmsnorm; examples/custom_op/allreduce_rmsnorm.sf).
//
// Build: part of the symmflow build (build/<preset>/lib/libmyops.so).
// Use:   symmflow ops --plugin build/release/lib/libmyops.so --namespace myops
#include "symmflow/ops/call.hpp"
#include "symmflow/ops/library.hpp"
#ifdef SYMMFLOW_HAVE_CUDA
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/runtime.hpp"
#endif

namespace {

using symmflow::Value;

std::vector<symmflow::TensorSpec> fused_shape(std::span<const Value> args) {
  const symmflow::Tensor& input = args[0].to_tensor();
  const symmflow::Tensor& residual = args[1].to_tensor();
  SF_CHECK(input.shape() == residual.shape() && input.dtype() == residual.dtype(),
           "myops::fused_allreduce_rmsnorm: input {} and residual {} differ", input.str(),
           residual.str());
  return {{input.dtype(), input.shape()}, {input.dtype(), input.shape()}};
}

void fused_cpu(symmflow::KernelCall& call) {
  Value reduced = symmflow::call("symm_mem::one_shot_all_reduce",
                                 {call.arg("input"), call.arg("reduce_op"), call.arg("group_name")});
  Value summed = symmflow::call("aten::add.Tensor", {reduced, call.arg("residual")});
  Value normed = symmflow::call(
      "aten::rms_norm", {summed, std::vector<int64_t>{call.arg("input").to_tensor().shape().back()},
                         call.arg("weight"), call.arg("eps")});
  symmflow::call("aten::copy_", {call.outputs[0], normed});
  symmflow::call("aten::copy_", {call.outputs[1], summed});
}

}  // namespace

SYMMFLOW_LIBRARY(myops, m) {
  m.def("fused_allreduce_rmsnorm(Tensor input, Tensor residual, Tensor weight, float eps, "
        "str reduce_op, str group_name) -> (Tensor out, Tensor residual_out)",
        fused_shape);
  m.register_symm_mem_args("fused_allreduce_rmsnorm", {"input"});
}

SYMMFLOW_LIBRARY_IMPL(myops, cpu, m) { m.impl("fused_allreduce_rmsnorm", fused_cpu); }

#ifdef SYMMFLOW_HAVE_CUDA
namespace {
// One kernel: symmflow::cuda::Communicator::all_reduce_rms_norm (same roundings as fused_cpu).
void fused_cuda(symmflow::KernelCall& call) {
  constexpr std::string_view op = "myops::fused_allreduce_rmsnorm";
  using symmflow::Tensor;
  const Tensor& input = call.arg("input").to_tensor();
  auto group = symmflow::Runtime::current().group(call.arg("group_name").to_string());
  symmflow::cuda::heap_of(input, op, "input", *group);
  auto dense = [](const Tensor& t) {
    return t.is_contiguous() ? t : symmflow::call("aten::clone", {t}).to_tensor();
  };
  const Tensor residual = dense(call.arg("residual").to_tensor());
  const Tensor weight = dense(call.arg("weight").to_tensor());
  const int64_t n = input.dim() == 0 ? 1 : input.shape().back();
  SF_CHECK(weight.dtype() == input.dtype() && weight.numel() == n,
           "{}: weight {} must hold {} elements of {} (the last dim of input)", op, weight.str(), n,
           symmflow::dtype_name(input.dtype()));
  const Tensor& out = call.out(0);
  const Tensor& residual_out = call.out(1);
  SF_CHECK(out.is_contiguous() && residual_out.is_contiguous(), "{}: outputs must be contiguous",
           op);
  symmflow::cuda::communicator(group, input.nbytes())
      .all_reduce_rms_norm(input.raw_data(), residual.raw_data(), weight.raw_data(),
                           out.raw_data(), residual_out.raw_data(), n == 0 ? 0 : input.numel() / n,
                           n, call.arg("eps").to_double(), input.dtype(),
                           call.arg("reduce_op").to_string(), symmflow::cuda::current_stream());
}
}  // namespace

SYMMFLOW_LIBRARY_IMPL(myops, cuda, m) { m.impl("fused_allreduce_rmsnorm", fused_cuda); }
#endif
