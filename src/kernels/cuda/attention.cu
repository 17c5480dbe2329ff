// The attention and embedding kernels (attention.hpp).
//
// Attention: one block of 128 threads per (batch, head, query row), reading q, k and v through
// their strides (a permuted view is read in place). The scores of the row live in
// shared memory (one per key): threads take keys in turn and compute scale * q . k_j, a block-wide
// max and sum of exp(s - max) follow, then threads take output columns in turn and sum
// p_j * v[j, col] over the keys. The arithmetic is the CPU kernel's (kernels/cpu/attention.cpp),
// in float (double for f64), so results agree up to summation order; written for clarity, not
// speed (no tiling, no tensor cores). A mask (AttentionMask) is read through its broadcast
// strides in the scores' loop.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/typed_access.cuh"

namespace symmflow::cuda {
namespace {

constexpr int kThreads = 128;

// Block-wide reduction of one value per thread (max when `is_max`, else sum).
template <typename A>
__device__ A block_reduce(A v, bool is_max) {
  __shared__ A partial[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) {
    A other = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? max(v, other) : v + other;
  }
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  A total = partial[0];
  for (int w = 1; w < kThreads / 32; ++w) {
    total = is_max ? max(total, partial[w]) : total + partial[w];
  }
  __syncthreads();
  return total;
}

template <typename A>
__global__ void attention_kernel(const AttentionOperand q, const AttentionOperand k,
                                 const AttentionOperand v, const AttentionMask m, void* o,
                                 PwType t, int64_t heads,
                                 int64_t kv_heads, int64_t L, int64_t S, int64_t E, int64_t Ev,
                                 bool causal, A scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  A* p = reinterpret_cast<A*>(smem);
  const int64_t row = blockIdx.x;  // (b * heads + h) * L + i
  const int64_t i = row % L;
  const int64_t bh = row / L;
  const int64_t b = bh / heads, h = bh % heads;
  const int64_t hk = h / (heads / kv_heads);
  const int64_t q_row = b * q.strides[0] + h * q.strides[1] + i * q.strides[2];
  const int64_t k_head = b * k.strides[0] + hk * k.strides[1];
  const int64_t v_head = b * v.strides[0] + hk * v.strides[1];
  const int64_t keys = causal ? (S < i + 1 ? S : i + 1) : S;
  const int64_t m_row = b * m.strides[0] + h * m.strides[1] + i * m.strides[2];
  A mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    A dot = 0;
    for (int64_t e = 0; e < E; ++e) {
      dot += ld<A>(q.data, t, q_row + e * q.strides[3]) *
             ld<A>(k.data, t, k_head + j * k.strides[2] + e * k.strides[3]);
    }
    A s = dot * scale;
    if (m.data != nullptr) {
      const int64_t at = m_row + j * m.strides[3];
      if (m.is_bool) {
        s = static_cast<const unsigned char*>(m.data)[at] != 0 ? s : A(-INFINITY);
      } else {
        s += ld<A>(m.data, m.type, at);
      }
    }
    p[j] = s;
    mx = max(mx, s);
  }
  mx = block_reduce(mx, true);
  if (mx == A(-INFINITY)) {  // every key masked: zeros (PyTorch's result); uniform per block
    for (int64_t c = threadIdx.x; c < Ev; c += blockDim.x) st(o, t, row * Ev + c, A(0));
    return;
  }
  A sum = 0;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    p[j] = exp(p[j] - mx);
    sum += p[j];
  }
  sum = block_reduce(sum, false);  // its __syncthreads also publishes p
  for (int64_t c = threadIdx.x; c < Ev; c += blockDim.x) {
    A acc = 0;
    for (int64_t j = 0; j < keys; ++j) {
      acc += (p[j] / sum) * ld<A>(v.data, t, v_head + j * v.strides[2] + c * v.strides[3]);
    }
    st(o, t, row * Ev + c, acc);
  }
}

template <typename A, typename I>
__global__ void embedding_kernel(const void* w, PwType t, int64_t row_stride, int64_t col_stride,
                                 const I* idx, void* out, int64_t count, int64_t rows,
                                 int64_t dim) {
  const int64_t total = count * dim;
  for (int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; n < total;
       n += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = int64_t(idx[n / dim]), c = n % dim;
    st(out, t, n, r >= 0 && r < rows ? ld<A>(w, t, r * row_stride + c * col_stride) : A(NAN));
  }
}

}  // namespace

int64_t attention_shared_bytes(int64_t kv_len, bool wide) {
  return kv_len * int64_t(wide ? sizeof(double) : sizeof(float));
}

int launch_attention(const AttentionOperand& q, const AttentionOperand& k,
                     const AttentionOperand& v, const AttentionMask& mask, void* o, PwType t,
                     int64_t batch, int64_t heads, int64_t kv_heads, int64_t q_len,
                     int64_t kv_len, int64_t head_dim, int64_t v_dim, bool causal, double scale,
                     void* stream) {
  const int64_t rows = batch * heads * q_len;
  if (rows == 0 || v_dim == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  const bool wide = t == PwType::f64;
  const size_t shared = size_t(attention_shared_bytes(kv_len, wide));
  if (wide) {
    attention_kernel<double><<<unsigned(rows), kThreads, shared, s>>>(
        q, k, v, mask, o, t, heads, kv_heads, q_len, kv_len, head_dim, v_dim, causal, scale);
  } else {
    attention_kernel<float><<<unsigned(rows), kThreads, shared, s>>>(
        q, k, v, mask, o, t, heads, kv_heads, q_len, kv_len, head_dim, v_dim, causal,
        float(scale));
  }
  return int(cudaGetLastError());
}

int launch_embedding(const void* weight, PwType t, int64_t row_stride, int64_t col_stride,
                     const void* idx, bool idx_i32, void* out, int64_t count, int64_t rows,
                     int64_t dim, void* stream) {
  const int64_t total = count * dim;
  if (total == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  const int64_t want = (total + 255) / 256;
  const unsigned blocks = unsigned(want < 8192 ? want : 8192);
  auto launch = [&](auto a_tag, auto i_tag) {
    using A = decltype(a_tag);
    using I = decltype(i_tag);
    embedding_kernel<A, I><<<blocks, 256, 0, s>>>(weight, t, row_stride, col_stride,
                                                  static_cast<const I*>(idx), out, count, rows,
                                                  dim);
  };
  if (t == PwType::f64) {
    if (idx_i32) launch(double(), int32_t());
    else launch(double(), int64_t());
  } else {
    if (idx_i32) launch(float(), int32_t());
    else launch(float(), int64_t());
  }
  return int(cudaGetLastError());
}

}  // namespace symmflow::cuda
