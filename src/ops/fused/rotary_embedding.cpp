// The `fused` namespace: compute ops that symmflow's rewrites make out of several aten ops, so
// that a backend runs them as one kernel (Note [fused compute ops]). Definitions and shape
// functions; kernels in kernels/cpu/rotary.cpp and kernels/cuda/pointwise/rotary.cu; raise_rotary makes
// rotary_embedding from the decomposition PyTorch traces.
#include "symmflow/ops/library.hpp"

namespace symmflow {
namespace {

// Note [fused compute ops]
// aten holds PyTorch's ops as PyTorch names them and symm_mem the communication ops; an op that
// only exists because a rewrite fused several aten ops (no PyTorch op computes it) lives in
// `fused`. Its result is defined as the aten composition it replaces, bit for bit (every
// intermediate rounded to the dtype as the composition rounds it), so a rewrite into it never
// changes a result; users do not write it, rewrites do (a graph may still name it).
//
// rotary_embedding(x, cos, sin) -> out is
//   out = x * cos + rotate_half(x) * sin,   rotate_half(x) = cat([-x[..., D/2:], x[..., :D/2]], -1)
// over the last dim of x (size D, even): the rotary position embedding of Llama-style models as
// transformers writes it (apply_rotary_pos_emb). cos and sin broadcast to x's shape (PyTorch's
// rules); x, cos and sin share one floating dtype, the result's; each product and the sum round
// to it (bf16 and f16 compute in float, as aten::mul and aten::add do).
std::vector<TensorSpec> rotary_embedding_shape(std::span<const Value> a) {
  constexpr std::string_view op = "fused::rotary_embedding";
  const Tensor& x = a[0].to_tensor();
  SF_CHECK(is_floating(x.dtype()), "{}: argument 'x' is {}; rotary embedding takes floats", op,
           x.str());
  SF_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0,
           "{}: argument 'x' is {}; its last dim (the head dim) must be even", op, x.str());
  for (size_t i = 1; i <= 2; ++i) {
    const char* name = i == 1 ? "cos" : "sin";
    const Tensor& t = a[i].to_tensor();
    SF_CHECK(t.dtype() == x.dtype(), "{}: argument '{}' is {} but must have x's dtype ({})", op,
             name, t.str(), dtype_name(x.dtype()));
    SF_CHECK(broadcasts_to(t.shape(), x.shape()),
             "{}: argument '{}' is {}, which does not broadcast to x's shape {}", op, name,
             t.str(), shape_str(x.shape()));
  }
  return {{x.dtype(), x.shape()}};
}

}  // namespace

SYMMFLOW_LIBRARY(fused, m) {
  m.def("rotary_embedding(Tensor x, Tensor cos, Tensor sin) -> Tensor", rotary_embedding_shape);
}

}  // namespace symmflow
