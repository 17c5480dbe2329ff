// The attention and embedding kernels (attention.hpp).
//
// Attention: one block of 128 threads per (batch, head, query row), reading q, k and v through
// their strides (a permuted view is read in place), the keys in tiles staged in shared memory
// with an online softmax (Note [attention tiles]). The arithmetic is the CPU kernel's
// (kernels/cpu/attention.cpp) in float (double for f64), so results agree up to summation order
// and the softmax's rescaling; no tensor cores. A mask (AttentionMask) is read through its
// broadcast strides in the scores' loop. The backward (attention_backward_kernel) keeps the
// row's scores in shared memory (one per key), recomputes its probabilities and accumulates dk
// and dv with atomic adds.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <tuple>
#include <type_traits>

#include "kernels/cuda/attention/attention.hpp"
#include "kernels/cuda/pointwise/convert.cuh"
#include "kernels/cuda/pointwise/typed_access.cuh"

namespace symmflow::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kMaxTile = 64;  // keys per tile (Note [attention tiles])

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

// A score s of key element `at` of the mask: kept or -inf (bool), or plus the mask's value; s
// itself without a mask.
template <typename A>
__device__ __forceinline__ A masked(A s, const AttentionMask& m, int64_t at) {
  if (m.data == nullptr) return s;
  if (m.is_bool) return static_cast<const unsigned char*>(m.data)[at] != 0 ? s : A(-INFINITY);
  return s + ld<A>(m.data, m.type, at);
}

// The scores of query row (b, h, i) over its `keys` allowed keys into p (scale, mask), and this
// thread's maximum of them (the caller reduces it over the block). A warp per key: its lanes take
// the head dimension in turn (coalesced loads of q and of the key's row) and sum by shuffles, so
// a short row is not one thread's serial dot product per key (16 keys of 128 dimensions took
// 31.5 us a decoder layer's call that way on an H200).
template <typename A>
__device__ A row_scores(const AttentionOperand& q, const AttentionOperand& k,
                        const AttentionMask& m, PwType t, int64_t b, int64_t h, int64_t i,
                        int64_t q_row, int64_t k_head, int64_t keys, int64_t E, A scale, A* p) {
  const int64_t m_row = b * m.strides[0] + h * m.strides[1] + i * m.strides[2];
  const int lane = int(threadIdx.x) % 32, warps = int(blockDim.x) / 32;
  A mx = -INFINITY;
  for (int64_t j = threadIdx.x / 32; j < keys; j += warps) {
    A dot = 0;
    for (int64_t e = lane; e < E; e += 32) {
      dot += ld<A>(q.data, t, q_row + e * q.strides[3]) *
             ld<A>(k.data, t, k_head + j * k.strides[2] + e * k.strides[3]);
    }
    for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    const A s = masked(dot * scale, m, m_row + j * m.strides[3]);
    if (lane == 0) p[j] = s;
    mx = max(mx, s);
  }
  return mx;
}

// An element of storage type S as the accumulator type A, and back (bf16 and f16 through float).
template <typename A, typename S>
__device__ __forceinline__ A load_acc(const void* p, int64_t i) {
  const S x = static_cast<const S*>(p)[i];
  if constexpr (std::is_same_v<S, float> || std::is_same_v<S, double>) {
    return A(x);
  } else {
    return A(to_f(x));
  }
}
template <typename A, typename S>
__device__ __forceinline__ void store_acc(void* p, int64_t i, A x) {
  if constexpr (std::is_same_v<S, float> || std::is_same_v<S, double>) {
    static_cast<S*>(p)[i] = S(x);
  } else {
    static_cast<S*>(p)[i] = from_f<S>(float(x));
  }
}

// Keys [j0, j0 + n) of one head of k and of v (rows of E and Ev elements) into ks [n, E] and vs
// [n, Ev] in shared memory: warp w takes keys w, w + warps, ...; each lane issues up to 32 loads
// (4 keys, 4 elements of k and 4 of v each) before it stores them, so a tile's loads are in
// flight together, and no index is divided per element.
template <typename A, typename S>
__device__ __forceinline__ void stage_tile(const AttentionOperand& k, int64_t k_head,
                                           const AttentionOperand& v, int64_t v_head, int64_t j0,
                                           int64_t n, int64_t E, int64_t Ev, A* ks, A* vs) {
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int warps = int(blockDim.x) / 32;
  const int64_t dims = E > Ev ? E : Ev;
  for (int64_t base = warp; base < n; base += 4 * warps) {
    for (int64_t e0 = 0; e0 < dims; e0 += 128) {
      A rk[4][4], rv[4][4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t j = base + u * warps;
        const int64_t k_row = k_head + (j0 + j) * k.strides[2];
        const int64_t v_row = v_head + (j0 + j) * v.strides[2];
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const int64_t e = e0 + lane + 32 * w;
          rk[u][w] = j < n && e < E ? load_acc<A, S>(k.data, k_row + e * k.strides[3]) : A(0);
          rv[u][w] = j < n && e < Ev ? load_acc<A, S>(v.data, v_row + e * v.strides[3]) : A(0);
        }
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t j = base + u * warps;
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const int64_t e = e0 + lane + 32 * w;
          if (j < n && e < E) ks[j * E + e] = rk[u][w];
          if (j < n && e < Ev) vs[j * Ev + e] = rv[u][w];
        }
      }
    }
  }
}

// Note [attention tiles]: one block per query row (b, h, i) walks the row's keys in tiles of
// `tile` keys. Each tile's rows of k and v are first copied into shared memory (stage_tile: up
// to 32 loads in flight a lane; a row of 16 keys read key after key from global memory took
// 13-16 us on an H200, latency-bound, and a copy that divided a 64-bit index per element was
// slower still), then the scores come from shared memory
// (a warp per key, lanes over the head dimension), and the output columns accumulate with an
// online softmax: the running maximum and sum of exp(s - max) rescale what the earlier tiles added
// (the flash-attention recurrence), so the key length no longer bounds shared memory, and a row
// of at most `tile` keys is one pass. Columns of the output accumulate in shared memory (one per
// column, a thread's columns its own) beside q's row; head dims whose q row, output row and one
// key's k and v rows do not fit in shared memory are refused (attention_tile gives 0). A tile
// whose keys are all masked with none unmasked before it adds nothing (its maximum is -inf); a
// row with every key masked comes out as zeros, PyTorch's result.
template <typename A, typename S>
__global__ void attention_kernel(const AttentionOperand q, const AttentionOperand k,
                                 const AttentionOperand v, const AttentionMask m, void* o,
                                 int64_t heads, int64_t kv_heads, int64_t L, int64_t S_len,
                                 int64_t E, int64_t Ev, bool causal, A scale, int64_t tile,
                                 int64_t split_keys, A* partial) {
  extern __shared__ __align__(16) unsigned char smem[];
  A* qs = reinterpret_cast<A*>(smem);  // [E]
  A* acc = qs + E;                      // [Ev]
  A* ks = acc + Ev;                     // [tile, E]
  A* vs = ks + tile * E;                // [tile, Ev]
  A* p = vs + tile * Ev;                // [tile]
  const int64_t row = blockIdx.x;       // (b * heads + h) * L + i
  const int64_t i = row % L;
  const int64_t bh = row / L;
  const int64_t b = bh / heads, h = bh % heads;
  const int64_t hk = h / (heads / kv_heads);
  const int64_t q_row = b * q.strides[0] + h * q.strides[1] + i * q.strides[2];
  const int64_t k_head = b * k.strides[0] + hk * k.strides[1];
  const int64_t v_head = b * v.strides[0] + hk * v.strides[1];
  const int64_t m_row = b * m.strides[0] + h * m.strides[1] + i * m.strides[2];
  const int64_t row_keys = causal ? (S_len < i + 1 ? S_len : i + 1) : S_len;
  const int64_t begin = int64_t(blockIdx.y) * split_keys;  // this block's keys [begin, keys)
  const int64_t keys = row_keys < begin + split_keys ? row_keys : begin + split_keys;
  const int tid = int(threadIdx.x), lane = tid % 32, warps = int(blockDim.x) / 32;
  for (int64_t e = tid; e < E; e += blockDim.x) {
    qs[e] = load_acc<A, S>(q.data, q_row + e * q.strides[3]);
  }
  for (int64_t c = tid; c < Ev; c += blockDim.x) acc[c] = A(0);
  A run_max = -INFINITY, run_sum = 0;
  for (int64_t j0 = begin; j0 < keys; j0 += tile) {
    const int64_t n = keys - j0 < tile ? keys - j0 : tile;
    __syncthreads();  // the last tile's readers are done; qs is visible on the first
    stage_tile<A, S>(k, k_head, v, v_head, j0, n, E, Ev, ks, vs);
    __syncthreads();
    A mx = -INFINITY;
    for (int64_t j = tid / 32; j < n; j += warps) {
      A dot = 0;
      for (int64_t e = lane; e < E; e += 32) dot += qs[e] * ks[j * E + e];
      for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      const A s = masked(dot * scale, m, m_row + (j0 + j) * m.strides[3]);
      if (lane == 0) p[j] = s;
      mx = max(mx, s);
    }
    const A new_max = max(run_max, block_reduce(mx, true));  // its __syncthreads publishes p
    if (new_max == A(-INFINITY)) continue;                   // uniform per block
    const A correction = exp(run_max - new_max);             // 0 while nothing was added
    A part = 0;
    for (int64_t j = tid; j < n; j += blockDim.x) {
      p[j] = exp(p[j] - new_max);
      part += p[j];
    }
    run_sum = run_sum * correction + block_reduce(part, false);  // publishes p
    for (int64_t c = tid; c < Ev; c += blockDim.x) {
      A a = acc[c] * correction;
      for (int64_t j = 0; j < n; ++j) a += p[j] * vs[j * Ev + c];
      acc[c] = a;
    }
    run_max = new_max;
  }
  if (partial != nullptr) {  // a split: its maximum, sum and unnormalised columns
    A* mine = partial + (row * gridDim.y + blockIdx.y) * (Ev + 2);
    for (int64_t c = tid; c < Ev; c += blockDim.x) mine[2 + c] = acc[c];
    if (tid == 0) mine[0] = run_max, mine[1] = run_sum;
    return;
  }
  for (int64_t c = tid; c < Ev; c += blockDim.x) {  // zeros when every key was masked
    store_acc<A, S>(o, row * Ev + c, run_max == A(-INFINITY) ? A(0) : acc[c] / run_sum);
  }
}

// Note [attention splits]: a row's splits (each its maximum m_s, sum l_s and columns a_s) combined:
// o = sum_s exp(m_s - M) a_s / sum_s exp(m_s - M) l_s with M the largest m_s; splits with no
// unmasked key (m_s = -inf) weigh nothing, and a row without any gives zeros. The splits' weights
// are computed once into shared memory by the block (one split a thread), so a column's sum reads
// independent values; a first version had every thread walk the splits' maxima and sums one
// dependent load after another (~60 us for 66 splits on an H200).
template <typename A, typename S>
__global__ void attention_combine_kernel(const A* partial, void* o, int64_t splits, int64_t Ev) {
  extern __shared__ __align__(16) unsigned char smem[];
  A* weight = reinterpret_cast<A*>(smem);  // [splits]
  const int64_t row = blockIdx.x;
  const A* part = partial + row * splits * (Ev + 2);
  A top = -INFINITY;
  for (int64_t x = threadIdx.x; x < splits; x += blockDim.x) top = max(top, part[x * (Ev + 2)]);
  top = block_reduce(top, true);
  A total = 0;
  for (int64_t x = threadIdx.x; x < splits; x += blockDim.x) {
    const A m = part[x * (Ev + 2)];
    weight[x] = m == A(-INFINITY) ? A(0) : exp(m - top);
    total += weight[x] * part[x * (Ev + 2) + 1];
  }
  total = block_reduce(total, false);  // its __syncthreads also publishes the weights
  for (int64_t c = threadIdx.x; c < Ev; c += blockDim.x) {
    A sum = 0;
#pragma unroll 8
    for (int64_t x = 0; x < splits; ++x) sum += weight[x] * part[x * (Ev + 2) + 2 + c];
    store_acc<A, S>(o, row * Ev + c, top == A(-INFINITY) ? A(0) : sum / total);
  }
}

// One block per (b, h, i): the row's probabilities (p), dp_j = dO_i . v_j, D = sum_j p_j dp_j,
// ds_j = scale p_j (dp_j - D); dq_i = sum_j ds_j k_j written, ds_j q_i and p_j dO_i added to the
// key/value head's accumulators (Note [attention backward] in ops/aten/meta_attention.cpp).
template <typename A>
__global__ void attention_backward_kernel(const AttentionOperand dout, const AttentionOperand q,
                                          const AttentionOperand k, const AttentionOperand v,
                                          const AttentionMask m, void* dq, A* dk_acc, A* dv_acc,
                                          PwType t, int64_t heads, int64_t kv_heads, int64_t L,
                                          int64_t S, int64_t E, int64_t Ev, bool causal,
                                          A scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  A* p = reinterpret_cast<A*>(smem);
  A* ds = p + S;
  const int64_t row = blockIdx.x;  // (b * heads + h) * L + i
  const int64_t i = row % L;
  const int64_t bh = row / L;
  const int64_t b = bh / heads, h = bh % heads;
  const int64_t hk = h / (heads / kv_heads);
  const int64_t q_row = b * q.strides[0] + h * q.strides[1] + i * q.strides[2];
  const int64_t o_row = b * dout.strides[0] + h * dout.strides[1] + i * dout.strides[2];
  const int64_t k_head = b * k.strides[0] + hk * k.strides[1];
  const int64_t v_head = b * v.strides[0] + hk * v.strides[1];
  const int64_t keys = causal ? (S < i + 1 ? S : i + 1) : S;
  A mx = row_scores<A>(q, k, m, t, b, h, i, q_row, k_head, keys, E, scale, p);
  mx = block_reduce(mx, true);
  if (mx == A(-INFINITY)) {  // every key masked: no gradient from this row; uniform per block
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) st(dq, t, row * E + e, A(0));
    return;
  }
  A sum = 0;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    p[j] = exp(p[j] - mx);
    sum += p[j];
  }
  sum = block_reduce(sum, false);
  A d = 0;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    p[j] /= sum;
    A dot = 0;
    for (int64_t e = 0; e < Ev; ++e) {
      dot += ld<A>(dout.data, t, o_row + e * dout.strides[3]) *
             ld<A>(v.data, t, v_head + j * v.strides[2] + e * v.strides[3]);
    }
    ds[j] = dot;
    d += p[j] * dot;
  }
  d = block_reduce(d, false);
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) ds[j] = scale * p[j] * (ds[j] - d);
  __syncthreads();
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    A acc = 0;
    for (int64_t j = 0; j < keys; ++j) {
      acc += ds[j] * ld<A>(k.data, t, k_head + j * k.strides[2] + e * k.strides[3]);
    }
    st(dq, t, row * E + e, acc);
  }
  A* dkh = dk_acc + (b * kv_heads + hk) * S * E;
  A* dvh = dv_acc + (b * kv_heads + hk) * S * Ev;
  for (int64_t n = threadIdx.x; n < keys * E; n += blockDim.x) {
    const int64_t j = n / E, e = n % E;
    atomicAdd(dkh + n, ds[j] * ld<A>(q.data, t, q_row + e * q.strides[3]));
  }
  for (int64_t n = threadIdx.x; n < keys * Ev; n += blockDim.x) {
    const int64_t j = n / Ev, e = n % Ev;
    atomicAdd(dvh + n, p[j] * ld<A>(dout.data, t, o_row + e * dout.strides[3]));
  }
}

template <typename A>
__global__ void store_kernel(const A* acc, void* out, PwType t, int64_t n) {
  for (int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < n;
       x += int64_t(gridDim.x) * blockDim.x) {
    st(out, t, x, acc[x]);
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

int64_t attention_splits(int64_t rows, int64_t kv_len, int64_t tile, int sms) {
  // Note [attention splits]: enough blocks for eight a multiprocessor (their loads in flight
  // together hide memory latency), each at least one tile.
  if (rows <= 0 || kv_len <= tile) return 1;
  const int64_t want = (8 * int64_t(sms) + rows - 1) / rows;
  const int64_t most = kv_len / tile;
  return want < most ? (want < 1 ? 1 : want) : most;
}

int64_t attention_tile(int64_t head_dim, int64_t v_dim, bool wide, int64_t max_shared) {
  const int64_t unit = wide ? sizeof(double) : sizeof(float);
  const int64_t fixed = (head_dim + v_dim) * unit, per_key = (head_dim + v_dim + 1) * unit;
  if (max_shared < fixed + per_key) return 0;
  const int64_t tile = (max_shared - fixed) / per_key;
  return tile < kMaxTile ? tile : kMaxTile;
}

int launch_attention(const AttentionOperand& q, const AttentionOperand& k,
                     const AttentionOperand& v, const AttentionMask& mask, void* o, PwType t,
                     int64_t batch, int64_t heads, int64_t kv_heads, int64_t q_len,
                     int64_t kv_len, int64_t head_dim, int64_t v_dim, bool causal, double scale,
                     int64_t tile, int64_t splits, void* partial, void* stream) {
  const int64_t rows = batch * heads * q_len;
  if (rows == 0 || v_dim == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  const bool wide = t == PwType::f64;
  const size_t unit = wide ? sizeof(double) : sizeof(float);
  if (kv_len > 0 && kv_len < tile) tile = kv_len;  // less shared memory: more blocks an SM
  const size_t shared = size_t(head_dim + v_dim + tile * (head_dim + v_dim + 1)) * unit;
  // Each split takes whole tiles; with one, the block writes the output itself.
  const int64_t per_split = (kv_len + splits - 1) / splits;
  const int64_t split_keys = splits > 1 ? (per_split + tile - 1) / tile * tile : kv_len + 1;
  auto run = [&](auto acc_tag, auto storage_tag) {
    using A = decltype(acc_tag);
    using S = decltype(storage_tag);
    A* part = splits > 1 ? static_cast<A*>(partial) : nullptr;
    attention_kernel<A, S><<<dim3(unsigned(rows), unsigned(splits)), kThreads, shared, s>>>(
        q, k, v, mask, o, heads, kv_heads, q_len, kv_len, head_dim, v_dim, causal, A(scale),
        tile, split_keys, part);
    if (part != nullptr) {
      attention_combine_kernel<A, S><<<unsigned(rows), kThreads, size_t(splits) * sizeof(A), s>>>(
          part, o, splits, v_dim);
    }
  };
  switch (t) {
    case PwType::f64: run(double(), double()); break;
    case PwType::bf16: run(float(), __nv_bfloat16()); break;
    case PwType::f16: run(float(), __half()); break;
    default: run(float(), float()); break;
  }
  return int(cudaGetLastError());
}

int launch_attention_backward(const AttentionOperand& dout, const AttentionOperand& q,
                              const AttentionOperand& k, const AttentionOperand& v,
                              const AttentionMask& mask, void* dq, void* dk, void* dv,
                              void* dk_acc, void* dv_acc, PwType t, int64_t batch, int64_t heads,
                              int64_t kv_heads, int64_t q_len, int64_t kv_len, int64_t head_dim,
                              int64_t v_dim, bool causal, double scale, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const bool wide = t == PwType::f64;
  const size_t unit = wide ? sizeof(double) : sizeof(float);
  const int64_t nk = batch * kv_heads * kv_len * head_dim, nv = batch * kv_heads * kv_len * v_dim;
  cudaMemsetAsync(dk_acc, 0, size_t(nk) * unit, s);
  cudaMemsetAsync(dv_acc, 0, size_t(nv) * unit, s);
  const int64_t rows = batch * heads * q_len;
  const size_t shared = 2 * size_t(attention_shared_bytes(kv_len, wide));
  auto run = [&](auto tag) {
    using A = decltype(tag);
    if (rows > 0) {
      attention_backward_kernel<A><<<unsigned(rows), kThreads, shared, s>>>(
          dout, q, k, v, mask, dq, static_cast<A*>(dk_acc), static_cast<A*>(dv_acc), t, heads,
          kv_heads, q_len, kv_len, head_dim, v_dim, causal, A(scale));
    }
    for (auto [acc, out, n] : {std::tuple{dk_acc, dk, nk}, std::tuple{dv_acc, dv, nv}}) {
      if (n == 0) continue;
      const int64_t want = (n + 255) / 256;
      store_kernel<A><<<unsigned(want < 4096 ? want : 4096), 256, 0, s>>>(
          static_cast<const A*>(acc), out, t, n);
    }
  };
  if (wide) {
    run(double());
  } else {
    run(float());
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
