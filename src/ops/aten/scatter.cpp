// The aten ops that AOT autograd's training graphs of transformers' decoders add, with PyTorch's
// schemas: constant_pad_nd (the loss's label shift), scatter.value (nll_loss's backward) and
// slice_scatter (the rotary embedding's backward); squeeze.dims is with the views (views.cpp).
// Shapes and checks in meta_scatter.hpp (Note [pad geometry], Note [scatter geometry]). Kernels:
// constant_pad_nd and slice_scatter are composed of copy_ and full.out on every backend
// (kernels/views.cpp); scatter.value in kernels/cpu/indexing.cpp and kernels/cuda/pointwise/aten_logic.cpp.
#include "ops/aten/meta_scatter.hpp"

namespace symmflow {

SYMMFLOW_LIBRARY(aten, m) {
  using aten_meta::Args;
  aten_meta::def(m, "constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor",
                 [](const Args& a) {
                   SF_CHECK(a["value"].is_number(), "{}: value must be a Scalar, got {}", a.op(),
                            a["value"].kind_name());
                   return std::vector<TensorSpec>{
                       aten_meta::pad_geometry(a.op(), a.tensor("self"), a["pad"]).spec};
                 });
  aten_meta::def(m, "scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor",
                 [](const Args& a) {
                   SF_CHECK(a["value"].is_number(), "{}: value must be a Scalar, got {}", a.op(),
                            a["value"].kind_name());
                   const Tensor& self = a.tensor("self");
                   return std::vector<TensorSpec>{
                       aten_meta::scatter_geometry(a.op(), self, a["dim"], a.tensor("index"), self)
                           .spec};
                 });
  aten_meta::def(m,
                 "slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? "
                 "end=None, SymInt step=1) -> Tensor",
                 [](const Args& a) {
                   const Tensor& self = a.tensor("self");
                   aten_meta::slice_scatter_geometry(a.op(), self, a.tensor("src"), a["dim"],
                                                     a["start"], a["end"], a["step"]);
                   return std::vector<TensorSpec>{TensorSpec{self.dtype(), self.shape()}};
                 });
}

}  // namespace symmflow
