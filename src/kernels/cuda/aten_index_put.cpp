// cuda kernel of aten::index_put: the bool-mask form (kernels/index_put.cpp, composed of the
// registry's GPU where.self / add.Tensor / copy_). Integer index tensors have no cuda kernel yet
// and are refused, naming the op.
#include "kernels/index_put.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cuda {
namespace {

void index_put_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  aten_meta::IndexPutGeometry g =
      aten_meta::index_put_geometry(op, call.arg("self").to_tensor(), call.arg("indices"),
                                    call.arg("values").to_tensor());
  SF_CHECK(g.mask, "{}: integer index tensors have no cuda kernel (a bool mask index has)", op);
  kernels::index_put_mask(call, g);
}

// Note [kernel checks] (ops/registry.hpp): only the bool-mask form has a cuda kernel.
std::string index_put_check(const OpDef& op, std::span<const Value> args) {
  const Value& indices = args[1];
  if (!indices.is_tensor_list()) return "";
  for (const Tensor& t : indices.to_tensor_list()) {
    if (t.dtype() != DType::boolean) {
      return fmt::format("{}: integer index tensors have no cuda kernel (a bool mask index has)",
                         op.name());
    }
  }
  return "";
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cuda, m) {
  m.impl("index_put", index_put_kernel);
  m.kernel_check("index_put", index_put_check);
}

}  // namespace symmflow::cuda
