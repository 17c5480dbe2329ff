// Example plugin: myops::fused_allreduce_rmsnorm, the pattern at the end of every tensor-parallel
// block: all-reduce the partial sums, add the residual, RMS-normalise.
//
//   out, residual_out = rms_norm(all_reduce(input) + residual, weight, eps)
//
// `input` must live in symmetric memory (register_symm_mem_args), so the compiler allocates the
// matmul that produces it straight in the group's heap. The CPU kernel composes registered ops;
// a backend can register a fused kernel for the same schema.
//
// Build: part of the symmflow build (build/<preset>/lib/libmyops.so).
// Use:   symmflow ops --plugin build/release/lib/libmyops.so --namespace myops
#include "symmflow/ops/call.hpp"
#include "symmflow/ops/library.hpp"

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
