// The two small kernels around cuDNN's masked attention (Note [cudnn masks] in
// cudnn_attention.cpp): a mask made into an additive bias of the attention's type, and the rows
// whose every key is masked set to PyTorch's result (zeros).
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/attention/attention_bias.hpp"
#include "kernels/cuda/pointwise/convert.cuh"

namespace symmflow::cuda {
namespace {

constexpr int kThreads = 256;

template <typename M>
__device__ float mask_value(const M* m, int64_t at) {
  return to_f(m[at]);
}
template <>
__device__ float mask_value(const bool* m, int64_t at) {
  return m[at] ? 0.0f : -INFINITY;
}

// bias[b, h, i, j] (contiguous, rows of s_pad) = the mask at [b, h, i, j] through its strides;
// padding columns j >= s get -inf. One row (b, h, i) per block at a time (grid-strided), its
// offset computed once; each thread writes kVec consecutive columns as one 16-byte store when
// s_pad is a multiple of kVec (it is for cuDNN's padded rows), else one column. At 8192 x 8192
// bf16 the former one-thread-per-element kernel (64-bit divisions per element) took 337 us.
constexpr int kVec = 8;

template <typename T>
struct alignas(16) BiasVec {
  T v[kVec];
};

template <typename M, typename T>
__global__ void mask_to_bias_kernel(const M* mask, int64_t s0, int64_t s1, int64_t s2, int64_t s3,
                                    T* bias, int64_t mh, int64_t l, int64_t s, int64_t s_pad,
                                    int64_t rows) {
  const bool vec = s_pad % kVec == 0 && sizeof(T) * kVec == 16 &&
                   reinterpret_cast<uintptr_t>(bias) % 16 == 0;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t i = r % l, h = (r / l) % mh, b = r / (l * mh);
    const M* row = mask + b * s0 + h * s1 + i * s2;
    T* out = bias + r * s_pad;
    auto at = [&](int64_t j) { return j < s ? mask_value(row, j * s3) : -INFINITY; };
    if (vec) {
      for (int64_t j0 = int64_t(threadIdx.x) * kVec; j0 < s_pad; j0 += int64_t(blockDim.x) * kVec) {
        BiasVec<T> o;
#pragma unroll
        for (int k = 0; k < kVec; ++k) o.v[k] = from_f<T>(at(j0 + k));
        *reinterpret_cast<BiasVec<T>*>(out + j0) = o;
      }
    } else {
      for (int64_t j = threadIdx.x; j < s_pad; j += blockDim.x) out[j] = from_f<T>(at(j));
    }
  }
}

template <typename T>
__global__ void masked_rows_kernel(float* stats, T* o, int64_t rows, int64_t dv,
                                   bool for_backward) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.y) + threadIdx.y; r < rows;
       r += int64_t(gridDim.x) * blockDim.y) {
    if (isfinite(stats[r])) continue;
    for (int64_t e = threadIdx.x; e < dv; e += blockDim.x) o[r * dv + e] = from_f<T>(0.0f);
    __syncwarp();
    if (threadIdx.x == 0 && for_backward) stats[r] = INFINITY;
  }
}

int blocks_for(int64_t n, int64_t per_block) {
  const int64_t b = (n + per_block - 1) / per_block;
  return int(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

template <typename T>
int mask_to_bias_typed(const AttentionMask& m, T* bias, int64_t mh, int64_t l, int64_t s,
                       int64_t s_pad, int64_t rows, cudaStream_t stream) {
  const int grid = int(rows < 65535 ? (rows > 0 ? rows : 1) : 65535);
  const int64_t* st = m.strides;
#define SF_BIAS_LAUNCH(MT)                                                                     \
  mask_to_bias_kernel<MT, T><<<grid, kThreads, 0, stream>>>(static_cast<const MT*>(m.data),   \
                                                            st[0], st[1], st[2], st[3], bias, \
                                                            mh, l, s, s_pad, rows)
  if (m.is_bool) {
    SF_BIAS_LAUNCH(bool);
  } else {
    switch (m.type) {
      case PwType::f32: SF_BIAS_LAUNCH(float); break;
      case PwType::f64: SF_BIAS_LAUNCH(double); break;
      case PwType::bf16: SF_BIAS_LAUNCH(__nv_bfloat16); break;
      case PwType::f16: SF_BIAS_LAUNCH(__half); break;
      default: return int(cudaErrorInvalidValue);
    }
  }
#undef SF_BIAS_LAUNCH
  return int(cudaGetLastError());
}

}  // namespace

int launch_mask_to_bias(const AttentionMask& mask, void* bias, PwType type, int64_t mb,
                        int64_t mh, int64_t l, int64_t s, int64_t s_pad, void* stream) {
  const int64_t rows = mb * mh * l;
  auto st = static_cast<cudaStream_t>(stream);
  if (type == PwType::bf16)
    return mask_to_bias_typed(mask, static_cast<__nv_bfloat16*>(bias), mh, l, s, s_pad, rows, st);
  if (type == PwType::f16)
    return mask_to_bias_typed(mask, static_cast<__half*>(bias), mh, l, s, s_pad, rows, st);
  return int(cudaErrorInvalidValue);
}

int launch_fix_masked_rows(float* stats, void* o, PwType type, int64_t rows, int64_t dv,
                           bool for_backward, void* stream) {
  const dim3 block(32, 8);
  const int grid = blocks_for(rows, 8);
  auto st = static_cast<cudaStream_t>(stream);
  if (type == PwType::bf16) {
    masked_rows_kernel<<<grid, block, 0, st>>>(stats, static_cast<__nv_bfloat16*>(o), rows, dv,
                                               for_backward);
  } else if (type == PwType::f16) {
    masked_rows_kernel<<<grid, block, 0, st>>>(stats, static_cast<__half*>(o), rows, dv,
                                               for_backward);
  } else {
    return int(cudaErrorInvalidValue);
  }
  return int(cudaGetLastError());
}

}  // namespace symmflow::cuda
