// cuda kernel of aten::index_put: the bool-mask form without accumulate, as one launch of the
// elementwise `where` (aten_logic.cpp) that writes the call's output: out = mask ? values : self,
// the mask seen over self's shape (stride 0 along the dims it does not cover) and the values
// broadcast, read in their own dtype. Nothing is allocated, so it runs inside a plan's CUDA
// graph capture (the composed form of kernels/index_put.cpp allocated temporaries and was refused
// there: a vocabulary-parallel embedding failed on two H200s). accumulate=True runs composed
// (kernels/index_put.cpp: eager calls only) and its kernel check keeps it out of compiled graphs,
// as it does integer index tensors, which have no cuda kernel; both name the op.
#include "kernels/cuda/program.hpp"
#include "kernels/index_put.hpp"
#include "ops/aten/meta_index_put.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cuda {
namespace {

void index_put_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  Tensor values = call.arg("values").to_tensor();
  aten_meta::IndexPutGeometry g =
      aten_meta::index_put_geometry(op, self, call.arg("indices"), values);
  SF_CHECK(g.mask, "{}: integer index tensors have no cuda kernel (a bool mask index has)", op);
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

// Note [kernel checks] (ops/registry.hpp): only the bool-mask form without accumulate.
std::string index_put_check(const OpDef& op, std::span<const Value> args) {
  const Value& indices = args[1];
  if (!indices.is_tensor_list()) return "";
  for (const Tensor& t : indices.to_tensor_list()) {
    if (t.dtype() != DType::boolean) {
      return fmt::format("{}: integer index tensors have no cuda kernel (a bool mask index has)",
                         op.name());
    }
  }
  if (args[3].is_bool() && args[3].to_bool())
    return fmt::format("{}: accumulate=True has no cuda kernel that runs in a plan", op.name());
  return "";
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cuda, m) {
  m.impl("index_put", index_put_kernel);
  m.kernel_check("index_put", index_put_check);
}

}  // namespace symmflow::cuda
