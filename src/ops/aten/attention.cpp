// aten::embedding and aten::scaled_dot_product_attention: schemas (PyTorch's) and shape functions.
// sdpa takes a bool or additive attn_mask (Note [attention masks]) and refuses a non-zero
// dropout_p; see meta_attention.cpp. scaled_dot_product_attention_backward is symmflow's (Note
// [attention backward] there): the gradients of query, key and value.
#include "ops/aten/meta.hpp"

namespace symmflow {

SYMMFLOW_LIBRARY(aten, m) {
  aten_meta::def(m,
                 "embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, "
                 "bool scale_grad_by_freq=False, bool sparse=False) -> Tensor",
                 [](const aten_meta::Args& a) {
                   return std::vector<TensorSpec>{aten_meta::embedding_spec(
                       a.op(), a.tensor("weight"), a.tensor("indices"), a["padding_idx"],
                       a["scale_grad_by_freq"], a["sparse"])};
                 });
  aten_meta::def(m,
                 "scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, "
                 "Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, *, "
                 "float? scale=None, bool enable_gqa=False) -> Tensor",
                 [](const aten_meta::Args& a) {
                   return std::vector<TensorSpec>{
                       aten_meta::sdpa_info(a.op(), a.tensor("query"), a.tensor("key"),
                                            a.tensor("value"), a["attn_mask"], a["dropout_p"],
                                            a["is_causal"], a["scale"], a["enable_gqa"])
                           .spec};
                 });
  aten_meta::def(m,
                 "scaled_dot_product_attention_backward(Tensor grad_out, Tensor query, Tensor key, "
                 "Tensor value, Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, "
                 "*, float? scale=None, bool enable_gqa=False) -> (Tensor grad_query, Tensor "
                 "grad_key, Tensor grad_value)",
                 [](const aten_meta::Args& a) {
                   aten_meta::sdpa_backward_info(a.op(), a.tensor("grad_out"), a.tensor("query"),
                                                 a.tensor("key"), a.tensor("value"),
                                                 a["attn_mask"], a["dropout_p"], a["is_causal"],
                                                 a["scale"], a["enable_gqa"]);
                   const Tensor& q = a.tensor("query");
                   const Tensor& k = a.tensor("key");
                   const Tensor& v = a.tensor("value");
                   return std::vector<TensorSpec>{
                       {q.dtype(), q.shape()}, {k.dtype(), k.shape()}, {v.dtype(), v.shape()}};
                 });
}

}  // namespace symmflow
