// Launchers of the attention and embedding kernels of attention.cu, callable without CUDA headers;
// they return the cudaError_t of the launch. Private to the cuda backend.
#pragma once

#include <cstdint>

#include "kernels/cuda/pointwise/pointwise.hpp"

namespace symmflow::cuda {

// Shared memory the attention backward kernel needs for a key length (one score per key).
int64_t attention_shared_bytes(int64_t kv_len, bool wide);

// Keys per tile of the attention kernel (Note [attention tiles] in attention.cu) whose shared
// memory (q's row, the output's accumulators, and per key a row of k and of v and a score) fits in
// max_shared bytes; at most 64; 0 when not even one key fits.
int64_t attention_tile(int64_t head_dim, int64_t v_dim, bool wide, int64_t max_shared);

// Blocks a query row's keys are split over (Note [attention splits] in attention.cu): 1 unless the
// rows alone give fewer than eight blocks to each of `sms` multiprocessors and each split gets a
// tile or more (decode, short queries over long keys).
int64_t attention_splits(int64_t rows, int64_t kv_len, int64_t tile, int sms);

// An attention operand seen as [batch, heads, len, dim]: its data and the element strides of
// those four dims (any layout that can be seen so, e.g. a permuted view: nothing is copied).
struct AttentionOperand {
  const void* data = nullptr;
  int64_t strides[4] = {};
};

// An attention mask seen as [batch, heads, q_len, kv_len] through broadcast strides (zero along
// broadcast dims); data null: no mask. A bool mask (`is_bool`, one byte per element) keeps the
// scores where it is non-zero; a floating one (of type `type`) is added to them.
struct AttentionMask {
  const void* data = nullptr;
  PwType type = PwType::f32;
  bool is_bool = false;
  int64_t strides[4] = {};
};

// o[b, h, i, :] = softmax_j(scale * q[b, h, i, :] . k[b, h / group, j, :]) v[b, h / group, j, :]
// over j < kv_len (j <= i when causal), group = heads / kv_heads; q [B, H, L, E], k [B, Hkv, S, E],
// v [B, Hkv, S, Ev], o [B, H, L, Ev] contiguous, all of type t (f32, bf16, f16, f64); float
// accumulation (double for f64). One block per (b, h, i) and split, the keys in tiles of `tile`
// (attention_tile, > 0); with splits > 1 (attention_splits) `partial` is scratch of
// batch * heads * q_len * splits * (v_dim + 2) floats (doubles for f64) that a second kernel
// combines. With a mask, a row whose keys are all masked comes out as zeros (PyTorch's result).
int launch_attention(const AttentionOperand& q, const AttentionOperand& k,
                     const AttentionOperand& v, const AttentionMask& mask, void* o, PwType t,
                     int64_t batch, int64_t heads, int64_t kv_heads, int64_t q_len,
                     int64_t kv_len, int64_t head_dim, int64_t v_dim, bool causal, double scale,
                     int64_t tile, int64_t splits, void* partial, void* stream);

// The gradients of attention (Note [attention backward] in ops/aten/meta_attention.cpp): one
// block per (b, h, i) recomputes the row's probabilities as launch_attention does, writes dq's
// row (contiguous [B, H, L, E], type t) and adds the row's terms of dk and dv into dk_acc
// [B, Hkv, S, E] and dv_acc [B, Hkv, S, Ev] (float, double for f64; atomic adds, so their
// summation order varies), which it zeroes first on the stream; then dk and dv (contiguous, type
// t) are written from them. dout [B, H, L, Ev] is read through its strides like q.
int launch_attention_backward(const AttentionOperand& dout, const AttentionOperand& q,
                              const AttentionOperand& k, const AttentionOperand& v,
                              const AttentionMask& mask, void* dq, void* dk, void* dv,
                              void* dk_acc, void* dv_acc, PwType t, int64_t batch, int64_t heads,
                              int64_t kv_heads, int64_t q_len, int64_t kv_len, int64_t head_dim,
                              int64_t v_dim, bool causal, double scale, void* stream);

// out[n, :] = weight[idx[n], :] for n < count; weight [rows, dim] of type t with element strides
// (row_stride, col_stride), idx contiguous i64 (i32 when `idx_i32`), out contiguous; an index
// outside [0, rows) gives a row of NaN (the GPU cannot raise mid-stream).
int launch_embedding(const void* weight, PwType t, int64_t row_stride, int64_t col_stride,
                     const void* idx, bool idx_i32, void* out, int64_t count, int64_t rows,
                     int64_t dim, void* stream);

}  // namespace symmflow::cuda
