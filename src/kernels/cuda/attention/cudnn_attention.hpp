// Attention through cuDNN's fused kernels (the frontend's graph API, Note [cudnn attention] in
// cudnn_attention.cpp), callable without cuDNN's headers. cuDNN is loaded on first use
// (Note [cudnn loading]); a build without its headers, or a machine without the library, answers
// every call with the reason, and the callers run symmflow's own kernel instead. Private to the
// cuda backend.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cuda/attention/attention.hpp"

namespace symmflow::cuda {

// "" when cuDNN is usable in this process (the first call loads it), else why not, e.g. "this
// symmflow was built without cuDNN's headers" or "no libcudnn.so.9 of version 9.19 found ...").
const std::string& cudnn_missing();
// The loaded library's version, "9.24.0" ("" when missing or turned off: tunable cuda_cudnn).
std::string cudnn_version();

// One attention call: q [B, H, L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev] through their strides,
// of type `type`; causal is PyTorch's (key j <= query i, top-left aligned).
struct SdpaShape {
  PwType type = PwType::bf16;
  int64_t batch = 1, heads = 1, kv_heads = 1, q_len = 0, kv_len = 0, head_dim = 0, v_dim = 0;
  bool causal = false;
  double scale = 1;
  AttentionOperand q, k, v;
  // Note [cudnn masks]: an additive bias, contiguous [bias_batch, bias_heads, L, bias_row] of
  // `type` (bias_batch 1 or B, bias_heads 1 or H, bias_row >= S); none when bias_row is 0.
  int64_t bias_batch = 1, bias_heads = 1, bias_row = 0;
};

// "" when cuDNN runs the forward of `s` (its plan is built and cached per thread and shape),
// else why not (the dtype, a head dim, a layout, a pointer's alignment, cuDNN's own refusal).
// `stats`: with the row statistics (masked calls ask for them, Note [cudnn masks]).
std::string cudnn_attention_refusal(const SdpaShape& s, bool stats = false);
// o = attention(q, k, v) into contiguous o [B, H, L, Ev] on the current stream; with `stats`
// (float [B, H, L], contiguous) also each row's log-sum-exp of its scaled scores, which the
// backward reads; `bias` the bias of s.bias_row (16-byte aligned). Only after
// cudnn_attention_refusal(s) returned "".
void cudnn_attention(const SdpaShape& s, void* o, void* stats, const void* bias = nullptr);

// The same for the backward: dq, dk, dv (contiguous, of q's, k's and v's shapes) from dout
// (through its strides), o (contiguous) and stats of the forward.
std::string cudnn_attention_backward_refusal(const SdpaShape& s, const AttentionOperand& dout);
void cudnn_attention_backward(const SdpaShape& s, const AttentionOperand& dout, const void* o,
                              const void* stats, void* dq, void* dk, void* dv,
                              const void* bias = nullptr);

}  // namespace symmflow::cuda
