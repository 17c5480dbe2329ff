// Contract in views.hpp.
#include "kernels/views.hpp"

#include "ops/aten/meta.hpp"
#include "symmflow/ops/call.hpp"

namespace symmflow::kernels {
namespace {

void set_view(KernelCall& call, const Tensor& self, const aten_meta::ViewGeometry& g) {
  call.outputs.at(0) = self.as_strided(g.shape, g.strides, g.offset);
}

void view_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  set_view(call, self, aten_meta::view_geometry(call.op.name(), self, call.arg("size")));
}

void reshape_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  aten_meta::ReshapeGeometry g =
      aten_meta::reshape_geometry(call.op.name(), self, call.arg("shape"));
  if (g.strides) {
    set_view(call, self, {g.shape, *g.strides, 0});
    return;
  }
  Tensor copy = symmflow::call("aten::clone", {self}).to_tensor();
  call.outputs.at(0) = copy.as_strided(g.shape, contiguous_strides(g.shape), 0);
}

void slice_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  set_view(call, self,
           aten_meta::slice_geometry(call.op.name(), self, call.arg("dim"), call.arg("start"),
                                     call.arg("end"), call.arg("step")));
}

void t_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  set_view(call, self, aten_meta::t_geometry(call.op.name(), self));
}

void transpose_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  set_view(call, self,
           aten_meta::transpose_geometry(call.op.name(), self, call.arg("dim0").to_int(),
                                         call.arg("dim1").to_int()));
}

}  // namespace

void register_view_kernels(Library& m) {
  m.impl("view", view_kernel);
  m.impl("reshape", reshape_kernel);
  m.impl("slice.Tensor", slice_kernel);
  m.impl("t", t_kernel);
  m.impl("transpose.int", transpose_kernel);
}

}  // namespace symmflow::kernels
