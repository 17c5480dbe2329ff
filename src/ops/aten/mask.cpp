// The aten ops of a decomposed causal attention mask (what core ATen makes of
// scaled_dot_product_attention(is_causal=True)): arange.start_step, logical_and, logical_not,
// any.dim, where.self, full_like, scalar_tensor (the comparisons it also uses: logic.cpp).
// Schemas are PyTorch's; layout, device, pin_memory and memory_format are accepted and ignored.
// Kernels: kernels/cpu/mask.cpp and kernels/cuda/pointwise/aten_logic.cpp.
#include "ops/aten/meta.hpp"

namespace symmflow {

SYMMFLOW_LIBRARY(aten, m) {
  using aten_meta::Args;
  aten_meta::def(m,
                 "arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? "
                 "dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> "
                 "Tensor",
                 [](const Args& a) {
                   return std::vector<TensorSpec>{
                       aten_meta::arange_info(a.op(), a["start"], a["end"], a["step"], a["dtype"])
                           .spec};
                 });
  aten_meta::def(m, "logical_and(Tensor self, Tensor other) -> Tensor", [](const Args& a) {
    return std::vector<TensorSpec>{
        aten_meta::logical_spec(a.op(), a.tensor("self"), &a.tensor("other"))};
  });
  aten_meta::def(m, "logical_not(Tensor self) -> Tensor", [](const Args& a) {
    return std::vector<TensorSpec>{aten_meta::logical_spec(a.op(), a.tensor("self"), nullptr)};
  });
  aten_meta::def(m, "any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor",
                 [](const Args& a) {
                   aten_meta::ReduceInfo info = aten_meta::reduce_info(
                       a.op(), a.tensor("self"), a["dim"], a["keepdim"], Value(), false);
                   return std::vector<TensorSpec>{TensorSpec{DType::boolean, info.spec.shape}};
                 });
  aten_meta::def(m, "where.self(Tensor condition, Tensor self, Tensor other) -> Tensor",
                 [](const Args& a) {
                   return std::vector<TensorSpec>{aten_meta::where_spec(
                       a.op(), a.tensor("condition"), a.tensor("self"), a.tensor("other"))};
                 });
  aten_meta::def(m,
                 "full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, Layout? "
                 "layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? "
                 "memory_format=None) -> Tensor",
                 [](const Args& a) {
                   SF_CHECK(a["fill_value"].is_number(), "{}: fill_value must be a Scalar, got {}",
                            a.op(), a["fill_value"].kind_name());
                   const Tensor& self = a.tensor("self");
                   DType dtype = a["dtype"].to_optional_dtype().value_or(self.dtype());
                   return std::vector<TensorSpec>{TensorSpec{dtype, self.shape()}};
                 });
  aten_meta::def(m,
                 "scalar_tensor(Scalar s, *, ScalarType? dtype=None, Layout? layout=None, Device? "
                 "device=None, bool? pin_memory=None) -> Tensor",
                 [](const Args& a) {
                   SF_CHECK(a["s"].is_number(), "{}: s must be a Scalar, got {}", a.op(),
                            a["s"].kind_name());
                   DType dtype = a["dtype"].to_optional_dtype().value_or(DType::f32);
                   return std::vector<TensorSpec>{TensorSpec{dtype, {}}};
                 });
}

}  // namespace symmflow
