// The aten ops that mixture-of-experts routing emits under torch.compile (transformers' Mixtral
// and Qwen3-MoE): topk and sort (+ sort.stable; Note [sort order] in meta_moe.hpp), div with a
// rounding mode (.Tensor_mode and .Scalar_mode: the FX importer maps `div.Tensor_mode(x, 2, ...)`
// with a Python number to .Scalar_mode), histc, empty_permuted and _grouped_mm, with PyTorch's
// schemas; shapes and checks in meta_moe.cpp. Kernels: kernels/cpu/moe.cpp and
// kernels/cuda/aten_moe.cpp.
#include "ops/aten/meta_moe.hpp"

namespace symmflow {

SYMMFLOW_LIBRARY(aten, m) {
  using aten_meta::Args;
  aten_meta::def(m,
                 "topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> "
                 "(Tensor values, Tensor indices)",
                 [](const Args& a) {
                   aten_meta::SortInfo info = aten_meta::topk_info(
                       a.op(), a.tensor("self"), a["k"], a["dim"], a["largest"]);
                   return std::vector<TensorSpec>{info.values, info.indices};
                 });
  aten_meta::def(m,
                 "sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor "
                 "indices)",
                 [](const Args& a) {
                   aten_meta::SortInfo info =
                       aten_meta::sort_info(a.op(), a.tensor("self"), a["dim"], a["descending"]);
                   return std::vector<TensorSpec>{info.values, info.indices};
                 });
  // Every sort here is stable (Note [sort order]): stable=None/False/True give the same result.
  aten_meta::def(m,
                 "sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> "
                 "(Tensor values, Tensor indices)",
                 [](const Args& a) {
                   aten_meta::SortInfo info =
                       aten_meta::sort_info(a.op(), a.tensor("self"), a["dim"], a["descending"]);
                   return std::vector<TensorSpec>{info.values, info.indices};
                 });
  // Not tagged pointwise: the fused executors know div as true division only (by its base name).
  for (const char* overload : {"Tensor_mode", "Scalar_mode"}) {
    aten_meta::def(m,
                   fmt::format("div.{}(Tensor self, {} other, *, str? rounding_mode) -> Tensor",
                               overload, overload[0] == 'T' ? "Tensor" : "Scalar"),
                   [](const Args& a) {
                     return std::vector<TensorSpec>{aten_meta::div_mode_info(
                         a.op(), a.tensor("self"), a["other"], a["rounding_mode"]).spec};
                   });
  }
  aten_meta::def(m, "histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor",
                 [](const Args& a) {
                   return std::vector<TensorSpec>{
                       aten_meta::histc_info(a.op(), a.tensor("self"), a["bins"], a["min"],
                                             a["max"]).spec};
                 });
  aten_meta::def(m,
                 "empty_permuted(SymInt[] size, int[] physical_layout, *, ScalarType? dtype=None, "
                 "Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
                 [](const Args& a) {
                   return std::vector<TensorSpec>{aten_meta::empty_permuted_spec(
                       a.op(), a["size"], a["physical_layout"], a["dtype"])};
                 });
  aten_meta::def(m,
                 "_grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None, Tensor? bias=None, "
                 "ScalarType? out_dtype=None) -> Tensor",
                 [](const Args& a) {
                   return std::vector<TensorSpec>{
                       aten_meta::grouped_mm_info(a.op(), a.tensor("self"), a.tensor("mat2"),
                                                  a["offs"], a["bias"], a["out_dtype"])
                           .spec};
                 });
}

}  // namespace symmflow
