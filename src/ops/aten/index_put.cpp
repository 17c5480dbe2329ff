// aten::index_put with PyTorch's schema (functional; the in-place index_put_ returns its mutated
// self, which symmflow's schema rule refuses, so functionalized graphs call this one). The two
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
}

}  // namespace symmflow
