// cuda kernels of symm_mem::fused_all_reduce_add_rms_norm and its _out variant (Note [fused
// all-reduce add rms_norm] in src/ops/symm_mem/defs.cpp): one kernel,
// Communicator::all_reduce_rms_norm (allreduce_rmsnorm.cu), on the rank thread's communicator of
// the op's group and the current stream. Every rounding is the composition's; only the order of
// the sum of squares within a row differs from the cpu kernel.
// Expects: `input` a GPU symmetric tensor of the op's group (heap_of names op and argument);
//   residual and weight of any layout (made contiguous first); f32, bf16 or f16.
//   Strided outputs go through a contiguous stand-in.
// Refuses: what the shape function refuses (also checked here for the _out variant), dtypes other
//   than f32 / bf16 / f16 (the communicator names op, dtype and backend).
#include "kernels/cuda/symm_args.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

void fused(std::string_view op, const Tensor& input, const Tensor& residual_arg,
           const Tensor& weight_arg, double eps, std::string_view reduce_op,
           std::string_view group_name, const Tensor& out, const Tensor& residual_out) {
  auto group = group_for(op, group_name);
  heap_of(input, op, "input", *group);
  SF_CHECK(input.dim() >= 1, "{}: argument 'input' ({}) needs at least one dim to normalize over",
           op, input.str());
  const int64_t n = input.shape().back();
  SF_CHECK(residual_arg.dtype() == input.dtype() && residual_arg.shape() == input.shape(),
           "{}: argument 'residual' is {} but must be like 'input' ({})", op, residual_arg.str(),
           input.str());
  SF_CHECK(weight_arg.dtype() == input.dtype() && weight_arg.numel() == n,
           "{}: weight {} must hold {} elements of {} (the last dim of input)", op,
           weight_arg.str(), n, dtype_name(input.dtype()));
  auto dense = [](const Tensor& t) { return t.is_contiguous() ? t : aten::clone(t); };
  const Tensor residual = dense(residual_arg);
  const Tensor weight = dense(weight_arg);
  DenseOut o(out), ro(residual_out);
  communicator(group, input.nbytes())
      .all_reduce_rms_norm(input.raw_data(), residual.raw_data(), weight.raw_data(), o.data(),
                           ro.data(), n == 0 ? 0 : input.numel() / n, n, eps, input.dtype(),
                           reduce_op, current_stream());
  o.finish();
  ro.finish();
}

SYMMFLOW_LIBRARY_IMPL(symm_mem, cuda, m) {
  m.impl("fused_all_reduce_add_rms_norm", [](KernelCall& c) {
    fused("symm_mem::fused_all_reduce_add_rms_norm", c.arg(0).to_tensor(), c.arg(1).to_tensor(),
          c.arg(2).to_tensor(), c.arg(3).to_double(), c.arg(4).to_string(), c.arg(5).to_string(),
          c.out(0), c.out(1));
  });
  m.impl("fused_all_reduce_add_rms_norm_out", [](KernelCall& c) {
    fused("symm_mem::fused_all_reduce_add_rms_norm_out", c.arg(0).to_tensor(),
          c.arg(1).to_tensor(), c.arg(2).to_tensor(), c.arg(3).to_double(), c.arg(4).to_string(),
          c.arg(5).to_string(), c.arg(6).to_tensor(), c.arg(7).to_tensor());
  });
}

}  // namespace
}  // namespace symmflow::cuda
