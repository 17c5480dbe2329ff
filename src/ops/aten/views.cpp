// aten views and shape ops: view, _unsafe_view, reshape, slice.Tensor, t, transpose.int, permute,
// expand, unsqueeze, squeeze.dims (return alias self in eager mode; reshape copies when no view
// exists), cat (+ cat.out) and the splits split_with_sizes and split.Tensor, whose list return has
// one view of self per piece (Note [list returns] in symmflow/schema/schema.hpp). _unsafe_view is
// declared aliasing, Tensor(a) -> Tensor(a), unlike PyTorch's schema, so that the planner treats it
// exactly as view (its kernel returns a view).
#include "ops/aten/meta.hpp"
#include "ops/aten/meta_multi.hpp"
#include "ops/aten/meta_scatter.hpp"

namespace symmflow {
namespace {

using aten_meta::Args;

std::vector<TensorSpec> spec_of(const Args& a, const Shape& shape) {
  return {TensorSpec{a.tensor("self").dtype(), shape}};
}

std::vector<TensorSpec> specs_of(const Args& a, const std::vector<aten_meta::ViewGeometry>& views) {
  std::vector<TensorSpec> out;
  out.reserve(views.size());
  for (const aten_meta::ViewGeometry& g : views) out.push_back({a.tensor("self").dtype(), g.shape});
  return out;
}

}  // namespace

SYMMFLOW_LIBRARY(aten, m) {
  aten_meta::def(m, "view(Tensor(a) self, SymInt[] size) -> Tensor(a)", [](const Args& a) {
    return spec_of(a, aten_meta::view_geometry(a.op(), a.tensor("self"), a["size"]).shape);
  });
  aten_meta::def(m, "_unsafe_view(Tensor(a) self, SymInt[] size) -> Tensor(a)", [](const Args& a) {
    return spec_of(a, aten_meta::view_geometry(a.op(), a.tensor("self"), a["size"]).shape);
  });
  aten_meta::def(m, "permute(Tensor(a) self, int[] dims) -> Tensor(a)", [](const Args& a) {
    return spec_of(a, aten_meta::permute_geometry(a.op(), a.tensor("self"), a["dims"]).shape);
  });
  aten_meta::def(m, "expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)",
                 [](const Args& a) {
                   return spec_of(
                       a, aten_meta::expand_geometry(a.op(), a.tensor("self"), a["size"]).shape);
                 });
  aten_meta::def(m, "unsqueeze(Tensor(a) self, int dim) -> Tensor(a)", [](const Args& a) {
    return spec_of(a, aten_meta::unsqueeze_geometry(a.op(), a.tensor("self"), a["dim"]).shape);
  });
  aten_meta::def(m, "squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)", [](const Args& a) {
    return spec_of(a, aten_meta::squeeze_dims_geometry(a.op(), a.tensor("self"), a["dim"]).shape);
  });
  aten_meta::def(m, "reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)", [](const Args& a) {
    return spec_of(a, aten_meta::reshape_geometry(a.op(), a.tensor("self"), a["shape"]).shape);
  });
  aten_meta::def(m,
                 "slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, "
                 "SymInt step=1) -> Tensor(a)",
                 [](const Args& a) {
                   return spec_of(a, aten_meta::slice_geometry(a.op(), a.tensor("self"), a["dim"],
                                                               a["start"], a["end"], a["step"])
                                         .shape);
                 });
  aten_meta::def(m, "t(Tensor(a) self) -> Tensor(a)", [](const Args& a) {
    return spec_of(a, aten_meta::t_geometry(a.op(), a.tensor("self")).shape);
  });
  aten_meta::def(m, "transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)",
                 [](const Args& a) {
                   return spec_of(a, aten_meta::transpose_geometry(a.op(), a.tensor("self"),
                                                                   a["dim0"].to_int(),
                                                                   a["dim1"].to_int())
                                         .shape);
                 });
  // PyTorch's schemas: `Tensor(a -> *)` (self may be aliased by results of any set), each result
  // of the list aliases self.
  aten_meta::def(m,
                 "split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> "
                 "Tensor(a)[]",
                 [](const Args& a) {
                   return specs_of(a, aten_meta::split_with_sizes_geometry(
                                          a.op(), a.tensor("self"), a["split_sizes"], a["dim"]));
                 });
  aten_meta::def(m, "split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
                 [](const Args& a) {
                   return specs_of(a, aten_meta::split_geometry(a.op(), a.tensor("self"),
                                                                a["split_size"], a["dim"]));
                 });
  aten_meta::def(m, "cat(Tensor[] tensors, int dim=0) -> Tensor", [](const Args& a) {
    return std::vector<TensorSpec>{
        aten_meta::cat_info(a.op(), a["tensors"].to_tensor_list(), a["dim"]).spec};
  });
  aten_meta::def(m, "cat.out(Tensor[] tensors, int dim=0, *, Tensor(a!) out) -> ()",
                 [](const Args& a) {
                   TensorSpec spec =
                       aten_meta::cat_info(a.op(), a["tensors"].to_tensor_list(), a["dim"]).spec;
                   aten_meta::check_out(a.op(), "out", a.tensor("out"), spec);
                   return std::vector<TensorSpec>{};
                 });
}

}  // namespace symmflow
