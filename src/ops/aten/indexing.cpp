// The aten indexing ops and scans that Hugging Face models use: index.Tensor (advanced indexing
// with a `Tensor?[]` of i32/i64 index tensors), index_select, gather and cumsum, with PyTorch's
// schemas; shapes and checks in meta_index.cpp (Note [gather geometry]). Kernels:
// kernels/cpu/indexing.cpp and kernels/cuda/pointwise/aten_logic.cpp.
#include "ops/aten/meta.hpp"

namespace symmflow {

SYMMFLOW_LIBRARY(aten, m) {
  using aten_meta::Args;
  aten_meta::def(m, "index.Tensor(Tensor self, Tensor?[] indices) -> Tensor", [](const Args& a) {
    return std::vector<TensorSpec>{
        aten_meta::index_geometry(a.op(), a.tensor("self"), a["indices"]).spec};
  });
  aten_meta::def(m, "index_select(Tensor self, int dim, Tensor index) -> Tensor",
                 [](const Args& a) {
                   return std::vector<TensorSpec>{aten_meta::index_select_geometry(
                       a.op(), a.tensor("self"), a["dim"], a.tensor("index")).spec};
                 });
  aten_meta::def(m, "gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor",
                 [](const Args& a) {
                   return std::vector<TensorSpec>{aten_meta::gather_geometry(
                       a.op(), a.tensor("self"), a["dim"], a.tensor("index")).spec};
                 });
  aten_meta::def(m, "cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor",
                 [](const Args& a) {
                   return std::vector<TensorSpec>{
                       aten_meta::cumsum_info(a.op(), a.tensor("self"), a["dim"], a["dtype"])
                           .spec};
                 });
}

}  // namespace symmflow
