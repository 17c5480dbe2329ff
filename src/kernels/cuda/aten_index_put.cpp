// cuda kernels of aten::index_put and its in-place index_put_ (the integer form). The bool-mask
// form without accumulate is one launch of the elementwise `where` (aten_logic.cpp) that writes
// the call's output: out = mask ? values : self, the mask seen over self's shape (stride 0 along
// the dims it does not cover) and the values broadcast, read in their own dtype. Integer index
// tensors without accumulate (transformers' MoE layers invert their token permutation with
// `inv_perm[perm] = arange(...)`): out = self, then one scatter launch (scatter_into: an index
// out of range is skipped, not raised; of repeated indices one value lands, unspecified which,
// as on PyTorch's GPUs). Values of another dtype are converted first, a scratch copy (Note
// [scratch inside a capture]); nothing else is allocated, so both run inside a plan's CUDA graph
// capture. accumulate=True with integer indices is the same scatter launch adding by atomics
// (Note [index_put accumulate on GPUs]); for a mask it runs composed (kernels/index_put.cpp:
// eager calls only), and the kernel check keeps that form, and dtypes without an atomic add, out
// of compiled graphs, naming the op.
#include "kernels/cuda/pointwise/program.hpp"
#include "kernels/index_put.hpp"
#include "ops/aten/meta_index_put.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cuda {
namespace {

void index_put_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  Tensor values = call.arg("values").to_tensor();
  aten_meta::IndexPutGeometry g =
      aten_meta::index_put_geometry(op, self, call.arg("indices"), values);
  if (!g.mask) {
    const bool accumulate = call.arg("accumulate").to_bool();
    SF_CHECK(!accumulate || scatter_accumulates(self.dtype()),
             "{}: accumulate=True with integer index tensors has no cuda kernel", op);
    const Tensor& out = call.out(0);
    aten::copy_(out, self);
    aten_meta::GatherGeometry gg = aten_meta::index_geometry(op, out, call.arg("indices"));
    if (values.dtype() != self.dtype())
      values = symmflow::call("aten::_to_copy", {values}, {{"dtype", self.dtype()}}).to_tensor();
    scatter_into(op, gg, values, accumulate);
    return;
  }
  if (call.arg("accumulate").to_bool()) {  // eager calls: composed, allocating (refused in plans)
    kernels::index_put_mask(call, g);
    return;
  }
  const Tensor& mask = call.arg("indices").to_tensor_list()[0];
  Strides mask_strides(self.shape().size(), 0);
  for (int64_t d = 0; d < g.mask_dims; ++d) mask_strides[size_t(d)] = mask.strides()[size_t(d)];
  Tensor cond = mask.as_strided(self.shape(), mask_strides, 0);
  if (g.values_view != values.shape()) {  // the leading 1 of the values dropped
    Strides st(values.strides().begin() + 1, values.strides().end());
    values = values.as_strided(g.values_view, st, 0);
  }
  masked_select_into(op, call.out(0), cond, values, self);
}

// index_put_: the integer form written into self (index_geometry refuses a mask, named), one
// scatter launch.
void index_put_inplace_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  Tensor values = call.arg("values").to_tensor();
  const bool accumulate = call.arg("accumulate").to_bool();
  SF_CHECK(!accumulate || scatter_accumulates(self.dtype()),
           "{}: accumulate=True with integer index tensors has no cuda kernel", op);
  if (values.dtype() != self.dtype())
    values = symmflow::call("aten::_to_copy", {values}, {{"dtype", self.dtype()}}).to_tensor();
  scatter_into(op, aten_meta::index_geometry(op, self, call.arg("indices")), values, accumulate);
}

// Note [index_put accumulate on GPUs]: accumulate=True with integer index tensors (the embedding
// backward, gradients of indexing: out = self, out[idx[i]] += values[i]) is scatter_into's
// accumulate: each indexed element adds its value by atomicAdd in self's dtype, so repeated
// indices sum (float sums in an unspecified order, as PyTorch's GPUs; integers exact), with no
// allocation, so it runs inside a plan's capture. bool and i8 have no atomic add, and the mask form
// stays composed (eager only): the kernel check refuses both in plans.
//
// Note [kernel checks] (ops/registry.hpp): the forms above.
std::string index_put_check(const OpDef& op, std::span<const Value> args) {
  if (!(args[3].is_bool() && args[3].to_bool())) return "";
  const Tensor& self = args[0].to_tensor();
  aten_meta::IndexPutGeometry g =
      aten_meta::index_put_geometry(op.name(), self, args[1], args[2].to_tensor());
  if (g.mask || !scatter_accumulates(self.dtype()))
    return fmt::format("{}: accumulate=True has no cuda kernel that runs in a plan", op.name());
  return "";
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cuda, m) {
  m.impl("index_put", index_put_kernel);
  m.kernel_check("index_put", index_put_check);
  m.impl("index_put_", index_put_inplace_kernel);
  m.kernel_check("index_put_", index_put_check);
}

}  // namespace symmflow::cuda
