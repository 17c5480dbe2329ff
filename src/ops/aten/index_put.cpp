// aten::index_put with PyTorch's schema (functional), and index_put_ writing self in place with
// PyTorch's arguments but no return (PyTorch's returns its mutated self, which symmflow's schema
// rule refuses): integer index tensors only. The importer writes a KV-cache update as
// functional<index_put_> so that reinplace writes the caller's cache in place (Note [the KV cache
// in place] in python/symmflow/torch/_fx_state.py). The two
// supported forms, integer index tensors and one bool mask, are in meta_index_put.hpp. Kernels:
// kernels/cpu/index_put.cpp (both forms) and kernels/cuda/aten_index_put.cpp (the mask form).
#include "ops/aten/meta_index_put.hpp"

namespace symmflow {

SYMMFLOW_LIBRARY(aten, m) {
  using aten_meta::Args;
  aten_meta::def(m,
                 "index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) "
                 "-> Tensor",
                 [](const Args& a) {
                   return std::vector<TensorSpec>{
                       aten_meta::index_put_geometry(a.op(), a.tensor("self"), a["indices"],
                                                     a.tensor("values"))
                           .spec};
                 });
  // No shape function: the op returns nothing (a mask, which only index_put takes, is refused by
  // the kernels' index geometry, named).
  m.def(
      "index_put_(Tensor(a!) self, Tensor?[] indices, Tensor values, bool accumulate=False) -> ()");
}

}  // namespace symmflow
