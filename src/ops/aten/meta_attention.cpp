// Meta functions of aten::embedding and aten::scaled_dot_product_attention (meta.hpp's contract):
// result types and every check, shared by the shape functions and the cpu and cuda kernels, so
// that a program is refused at compile time with the message an eager call gives.
#include <cmath>

#include "ops/aten/meta.hpp"

namespace symmflow::aten_meta {

TensorSpec embedding_spec(std::string_view op, const Tensor& weight, const Tensor& indices,
                          const Value& padding_idx, const Value& scale_grad_by_freq,
                          const Value& sparse) {
  // padding_idx, scale_grad_by_freq and sparse only change the gradient: accepted, unused.
  (void)padding_idx.to_int();
  (void)scale_grad_by_freq.to_bool();
  (void)sparse.to_bool();
  SF_CHECK(weight.dim() == 2,
           "{}: weight must be 2-D [num_embeddings, embedding_dim], got shape {}", op,
           shape_str(weight.shape()));
  check_dtype(indices.dtype() == DType::i64 || indices.dtype() == DType::i32, op, "indices",
              indices.dtype(), "i64 or i32");
  Shape shape = indices.shape();
  shape.push_back(weight.shape()[1]);
  return {weight.dtype(), shape};
}

namespace {

// The dims of an attention operand [..., heads, len, dim] with the leading dims flattened.
struct Dims {
  int64_t batch = 1, heads = 0, len = 0, dim = 0;
};

Dims dims_of(std::string_view op, const char* name, const Tensor& t, const Tensor& query) {
  SF_CHECK(t.dim() >= 3, "{}: {} must have at least 3 dims [..., heads, len, dim], got shape {}",
           op, name, shape_str(t.shape()));
  SF_CHECK(t.dim() == query.dim(),
           "{}: {} has shape {} and query has shape {}; expected the same number of dims", op, name,
           shape_str(t.shape()), shape_str(query.shape()));
  check_dtype(is_floating(t.dtype()), op, name, t.dtype(), "f32, bf16, f16 or f64");
  SF_CHECK(t.dtype() == query.dtype(),
           "{}: {} has dtype {} and query has dtype {}; expected the same dtype", op, name,
           dtype_name(t.dtype()), dtype_name(query.dtype()));
  const Shape& s = t.shape();
  const size_t r = s.size();
  Dims d{1, s[r - 3], s[r - 2], s[r - 1]};
  for (size_t i = 0; i + 3 < r; ++i) {
    SF_CHECK(s[i] == query.shape()[i],
             "{}: {} has shape {} and query has shape {}; the leading (batch) dims must be equal",
             op, name, shape_str(s), shape_str(query.shape()));
    d.batch *= s[i];
  }
  return d;
}

}  // namespace

SdpaInfo sdpa_info(std::string_view op, const Tensor& query, const Tensor& key,
                   const Tensor& value, const Value& attn_mask, const Value& dropout_p,
                   const Value& is_causal, const Value& scale, const Value& enable_gqa) {
  const double dropout = dropout_p.to_double();
  SF_CHECK(dropout == 0.0, "{}: dropout_p must be 0.0 (inference only), got {}", op, dropout);
  Dims q = dims_of(op, "query", query, query);
  Dims k = dims_of(op, "key", key, query);
  Dims v = dims_of(op, "value", value, query);
  SF_CHECK(k.dim == q.dim, "{}: key has head dim {} but query has {} (query {}, key {})", op, k.dim,
           q.dim, shape_str(query.shape()), shape_str(key.shape()));
  SF_CHECK(v.heads == k.heads && v.len == k.len,
           "{}: value has shape {} but key has shape {}; expected the same heads and length", op,
           shape_str(value.shape()), shape_str(key.shape()));
  const bool gqa = enable_gqa.to_bool();
  if (gqa) {
    SF_CHECK(k.heads > 0 && q.heads % k.heads == 0,
             "{}: query has {} heads and key/value have {}; with enable_gqa the query heads must "
             "be a multiple of the key/value heads",
             op, q.heads, k.heads);
  } else {
    SF_CHECK(k.heads == q.heads,
             "{}: query has {} heads and key/value have {}; expected the same number of heads "
             "(pass enable_gqa=True for grouped key/value heads)",
             op, q.heads, k.heads);
  }
  SdpaInfo info;
  info.batch = q.batch;
  info.heads = q.heads;
  info.kv_heads = k.heads;
  info.q_len = q.len;
  info.kv_len = k.len;
  info.head_dim = q.dim;
  info.v_dim = v.dim;
  info.causal = is_causal.to_bool();
  std::optional<double> s = scale.to_optional_double();
  info.scale = s ? *s : 1.0 / std::sqrt(double(q.dim));
  if (!attn_mask.is_none()) {
    // Note [attention masks]: a bool mask keeps the scores where it is true, a floating one is
    // added to them; either broadcasts to [..., heads, q_len, kv_len]. PyTorch refuses a mask
    // together with is_causal, and so does this.
    const Tensor& mask = attn_mask.to_tensor();
    SF_CHECK(!info.causal, "{}: attn_mask and is_causal=True cannot be given together", op);
    check_dtype(mask.dtype() == DType::boolean || is_floating(mask.dtype()), op, "attn_mask",
                mask.dtype(), "bool, f32, bf16, f16 or f64");
    Shape scores = query.shape();
    scores.back() = k.len;
    SF_CHECK(mask.dim() <= int64_t(scores.size()),
             "{}: attn_mask has shape {}, which does not broadcast to the scores' shape {}", op,
             shape_str(mask.shape()), shape_str(scores));
    for (size_t d = 0; d < size_t(mask.dim()); ++d) {
      int64_t m = mask.shape()[d], want = scores[scores.size() - size_t(mask.dim()) + d];
      SF_CHECK(m == 1 || m == want,
               "{}: attn_mask has shape {}, which does not broadcast to the scores' shape {}", op,
               shape_str(mask.shape()), shape_str(scores));
    }
    info.has_mask = true;
    info.mask_is_bool = mask.dtype() == DType::boolean;
    info.scores_shape = scores;
  }
  info.spec.dtype = query.dtype();
  info.spec.shape = query.shape();
  info.spec.shape.back() = v.dim;
  return info;
}

// Note [attention backward]: PyTorch has no single backward op for attention (its flash,
// efficient and math kernels each have their own, with their own saved state), so symmflow
// declares one, `aten::scaled_dot_product_attention_backward`, with the forward's arguments after
// grad_out and the gradients of query, key and value as its results. It saves nothing from the
// forward: it recomputes the probabilities P = softmax(scale * q k^T + mask) row by row (flash
// attention's trade of compute for memory), then with D_i = sum_j P_ij (dO_i . v_j):
//   dv_j = sum_i P_ij dO_i,  dS_ij = P_ij (dO_i . v_j - D_i),
//   dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i,
// summed over the query heads that share a key/value head (enable_gqa). The mask gets no
// gradient (transformers' masks are bool or built from constants). The torch bridge gives its
// attention op this formula (python/symmflow/torch/_sdpa.py), so a training graph keeps attention
// whole in the forward and in the backward.
SdpaInfo sdpa_backward_info(std::string_view op, const Tensor& grad_out, const Tensor& query,
                            const Tensor& key, const Tensor& value, const Value& attn_mask,
                            const Value& dropout_p, const Value& is_causal, const Value& scale,
                            const Value& enable_gqa) {
  SdpaInfo info = sdpa_info(op, query, key, value, attn_mask, dropout_p, is_causal, scale,
                            enable_gqa);
  SF_CHECK(grad_out.shape() == info.spec.shape,
           "{}: grad_out has shape {} but the attention's result has shape {}", op,
           shape_str(grad_out.shape()), shape_str(info.spec.shape));
  SF_CHECK(grad_out.dtype() == query.dtype(),
           "{}: grad_out has dtype {} and query has dtype {}; expected the same dtype", op,
           dtype_name(grad_out.dtype()), dtype_name(query.dtype()));
  return info;
}

}  // namespace symmflow::aten_meta
