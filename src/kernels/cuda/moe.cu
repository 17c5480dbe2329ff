// The GPU kernels of moe.hpp: sorting lines (a shared-memory bitonic sort per line, or a
// global-memory bitonic network of one launch per step), histc in one block, and a simple
// _grouped_mm that reads its group offsets on the device. Written for clarity over speed.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/collectives/collectives.hpp"
#include "kernels/cuda/moe.hpp"
#include "kernels/cuda/pointwise/typed_access.cuh"

namespace symmflow::cuda {
namespace {

__device__ __forceinline__ void copy_elem(void* dst, int64_t di, const void* src, int64_t si,
                                          int size) {
  switch (size) {
    case 1: static_cast<uint8_t*>(dst)[di] = static_cast<const uint8_t*>(src)[si]; break;
    case 2: static_cast<uint16_t*>(dst)[di] = static_cast<const uint16_t*>(src)[si]; break;
    case 4: static_cast<uint32_t*>(dst)[di] = static_cast<const uint32_t*>(src)[si]; break;
    default: static_cast<uint64_t*>(dst)[di] = static_cast<const uint64_t*>(src)[si];
  }
}

__device__ __forceinline__ void swap_elems(void* p, int64_t i, int64_t j, int size) {
  switch (size) {
    case 1: { auto* q = static_cast<uint8_t*>(p); uint8_t t = q[i]; q[i] = q[j]; q[j] = t; break; }
    case 2: { auto* q = static_cast<uint16_t*>(p); uint16_t t = q[i]; q[i] = q[j]; q[j] = t; break; }
    case 4: { auto* q = static_cast<uint32_t*>(p); uint32_t t = q[i]; q[i] = q[j]; q[j] = t; break; }
    default: { auto* q = static_cast<uint64_t*>(p); uint64_t t = q[i]; q[i] = q[j]; q[j] = t; }
  }
}

// Note [sort order] (ops/aten/meta_moe.hpp): does (p, a) come before (q, b)?
template <typename C>
__device__ __forceinline__ bool before(C p, int64_t a, C q, int64_t b, bool desc) {
  if constexpr (std::is_same_v<C, double>) {
    const bool pn = isnan(p), qn = isnan(q);
    if (pn || qn) return pn && qn ? a < b : (desc ? pn : qn);
  }
  if (p != q) return desc ? q < p : p < q;
  return a < b;
}

__device__ __forceinline__ int64_t line_base(int64_t l, int64_t n, int64_t inner) {
  return (l / inner) * n * inner + l % inner;
}

// One block per line: (key, index) pairs of the line in shared memory, padded to P (a power of
// two) with entries of index -1 that come after every element; a bitonic sort; the first k out.
template <typename C>
__global__ void sort_small_kernel(const __grid_constant__ SortLines s, int P) {
  extern __shared__ unsigned char smem[];
  C* keys = reinterpret_cast<C*>(smem);
  int* idx = reinterpret_cast<int*>(keys + P);
  auto earlier = [&](int i, int j) {  // entry i before entry j
    if (idx[i] < 0) return false;
    if (idx[j] < 0) return true;
    return before(keys[i], idx[i], keys[j], idx[j], s.descending);
  };
  for (int64_t l = blockIdx.x; l < s.lines; l += gridDim.x) {
    const int64_t base = line_base(l, s.n, s.inner);
    for (int j = threadIdx.x; j < P; j += blockDim.x) {
      const bool real = j < s.n;
      keys[j] = real ? ld<C>(s.x, s.type, base + j * s.inner) : C(0);
      idx[j] = real ? j : -1;
    }
    __syncthreads();
    for (int size = 2; size <= P; size <<= 1) {
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        for (int t = threadIdx.x; t < P / 2; t += blockDim.x) {
          const int i = 2 * stride * (t / stride) + t % stride, j = i + stride;
          const bool up = (i & size) == 0;
          if (up ? earlier(j, i) : earlier(i, j)) {
            const C kt = keys[i];
            keys[i] = keys[j];
            keys[j] = kt;
            const int it = idx[i];
            idx[i] = idx[j];
            idx[j] = it;
          }
        }
        __syncthreads();
      }
    }
    const int64_t out_base = line_base(l, s.k, s.inner);
    for (int j = threadIdx.x; j < s.k; j += blockDim.x) {
      copy_elem(s.values, out_base + j * s.inner, s.x, base + int64_t(idx[j]) * s.inner,
                s.elem_size);
      s.indices[out_base + j * s.inner] = idx[j];
    }
    __syncthreads();
  }
}

__global__ void sort_init_kernel(const __grid_constant__ SortLines s) {
  const int64_t total = s.lines * s.n, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t l = e / s.n, j = e % s.n;
    s.indices[line_base(l, s.n, s.inner) + j * s.inner] = j;
  }
}

// One step of the all-ascending bitonic network over lines padded to P: `flip` compares i with its
// mirror in its block of `size`, else i with i + stride. A comparator whose later end is past n
// never swaps (the padding comes after everything), so it is skipped.
template <typename C>
__global__ void sort_step_kernel(const __grid_constant__ SortLines s, int64_t P, int64_t size,
                                 int64_t stride, bool flip) {
  const int64_t half_p = P / 2, total = s.lines * half_p, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    const int64_t l = t / half_p, q = t % half_p;
    int64_t i, j;
    if (flip) {
      const int64_t half = size / 2, blk = q / half, o = q % half;
      i = blk * size + o;
      j = blk * size + size - 1 - o;
    } else {
      i = 2 * stride * (q / stride) + q % stride;
      j = i + stride;
    }
    if (j >= s.n) continue;
    const int64_t base = line_base(l, s.n, s.inner);
    const int64_t oi = base + i * s.inner, oj = base + j * s.inner;
    const C ki = ld<C>(s.values, s.type, oi), kj = ld<C>(s.values, s.type, oj);
    const int64_t ii = s.indices[oi], ij = s.indices[oj];
    if (before(kj, ij, ki, ii, s.descending)) {
      swap_elems(s.values, oi, oj, s.elem_size);
      s.indices[oi] = ij;
      s.indices[oj] = ii;
    }
  }
}

bool integer_keys(PwType t) {
  return t == PwType::i32 || t == PwType::i64 || t == PwType::i8 || t == PwType::u32 ||
         t == PwType::boolean;
}

int blocks_for(int64_t n, int threads) {
  const int64_t want = (n + threads - 1) / threads;
  return int(want < 1 ? 1 : (want < 8192 ? want : 8192));
}

int64_t pow2_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// ---- histc ----------------------------------------------------------------------------------------

constexpr int kHistcThreads = 1024;
constexpr int kHistcChunk = 8192;  // counters in shared memory per pass over x

// One step of arithmetic in the element type t (float for f32/bf16/f16, double for f64).
template <typename A>
__device__ __forceinline__ A in_type(A v, PwType t) {
  if (t == PwType::bf16) return A(__bfloat162float(__float2bfloat16_rn(float(v))));
  if (t == PwType::f16) return A(__half2float(__float2half_rn(float(v))));
  return v;
}

__device__ double block_reduce(double v, bool is_min, double* scratch) {
  for (int o = 16; o > 0; o >>= 1) {
    const double w = __shfl_down_sync(0xffffffffu, v, o);
    v = is_min ? fmin(v, w) : fmax(v, w);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x / 32) ? scratch[lane] : (is_min ? INFINITY : -INFINITY);
    for (int o = 16; o > 0; o >>= 1) {
      const double w = __shfl_down_sync(0xffffffffu, v, o);
      v = is_min ? fmin(v, w) : fmax(v, w);
    }
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  v = scratch[0];
  __syncthreads();
  return v;
}

// The range of the data (NaN when any is NaN), widened by one each way when it is one value.
__device__ void data_range(const HistcArgs& a, double* scratch, double& lo, double& hi) {
  double mn = INFINITY, mx = -INFINITY;
  bool nan = false;
  for (int64_t i = threadIdx.x; i < a.numel; i += blockDim.x) {
    const double v = ld<double>(a.x, a.type, i);
    if (isnan(v)) {
      nan = true;
    } else {
      mn = fmin(mn, v);
      mx = fmax(mx, v);
    }
  }
  nan = __syncthreads_or(nan);
  lo = block_reduce(mn, true, scratch);
  hi = block_reduce(mx, false, scratch);
  if (nan) lo = hi = NAN;
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
}

template <typename A>
__global__ void histc_kernel(const __grid_constant__ HistcArgs a) {
  __shared__ unsigned int counts[kHistcChunk];
  __shared__ double scratch[32];
  double lo = a.lo, hi = a.hi;
  if (a.from_data) data_range(a, scratch, lo, hi);
  const bool ok = isfinite(lo) && isfinite(hi) && lo < hi;
  const A left = in_type(A(lo), a.type), right = in_type(A(hi), a.type);
  const A bins = in_type(A(a.bins), a.type), width = in_type(right - left, a.type);
  for (int64_t chunk = 0; chunk < a.bins; chunk += kHistcChunk) {
    const int64_t cn = a.bins - chunk < kHistcChunk ? a.bins - chunk : kHistcChunk;
    for (int64_t j = threadIdx.x; j < cn; j += blockDim.x) counts[j] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; ok && i < a.numel; i += blockDim.x) {
      const A v = ld<A>(a.x, a.type, i);
      if (!(v >= left && v <= right)) continue;
      int64_t pos = int64_t(in_type(in_type(in_type(v - left, a.type) * bins, a.type) / width,
                                    a.type));
      pos = pos < 0 ? 0 : (pos >= a.bins ? a.bins - 1 : pos);  // max goes in the last bin
      if (pos >= chunk && pos < chunk + cn) atomicAdd(&counts[pos - chunk], 1u);
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < cn; j += blockDim.x) {
      st<A>(a.out, a.type, chunk + j, A(counts[j]));
    }
    __syncthreads();
  }
}

// Integer self (Note [integer histc] in kernels/cpu/moe.cpp): int64 arithmetic, truncating
// division; the data's range is reduced in double (exact up to 2^53).
__global__ void histc_int_kernel(const __grid_constant__ HistcArgs a) {
  __shared__ unsigned int counts[kHistcChunk];
  __shared__ double scratch[32];
  double lo = a.lo, hi = a.hi;
  if (a.from_data) data_range(a, scratch, lo, hi);
  const int64_t left = int64_t(lo), right = int64_t(hi);
  for (int64_t chunk = 0; chunk < a.bins; chunk += kHistcChunk) {
    const int64_t cn = a.bins - chunk < kHistcChunk ? a.bins - chunk : kHistcChunk;
    for (int64_t j = threadIdx.x; j < cn; j += blockDim.x) counts[j] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; left < right && i < a.numel; i += blockDim.x) {
      const int64_t v = ld<int64_t>(a.x, a.type, i);
      if (v < left || v > right) continue;
      int64_t pos = (v - left) * a.bins / (right - left);
      if (pos == a.bins) pos = a.bins - 1;
      if (pos >= chunk && pos < chunk + cn) atomicAdd(&counts[pos - chunk], 1u);
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < cn; j += blockDim.x) {
      st<int64_t>(a.out, a.type, chunk + j, int64_t(counts[j]));
    }
    __syncthreads();
  }
}

// ---- _grouped_mm ----------------------------------------------------------------------------------

__global__ void grouped_mm_kernel(const __grid_constant__ GroupedMmArgs a) {
  const int64_t total = a.rows * a.n, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t r = e / a.n, c = e % a.n;
    int64_t lo = 0, hi = a.groups;  // the first group whose end is past r
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      const int64_t end = a.offs_i64 ? static_cast<const int64_t*>(a.offs)[mid]
                                     : int64_t(static_cast<const int32_t*>(a.offs)[mid]);
      if (end > r) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    float acc = 0;
    if (lo < a.groups) {
      const int64_t ab = r * a.a_strides[0], bb = lo * a.b_strides[0] + c * a.b_strides[2];
      for (int64_t k = 0; k < a.k; ++k) {
        acc += ld<float>(a.a, a.type, ab + k * a.a_strides[1]) *
               ld<float>(a.b, a.type, bb + k * a.b_strides[1]);
      }
    }
    st<float>(a.out, a.type, e, acc);
  }
}

int preload_moe_kernels() {
  cudaFuncAttributes attr;
  cudaFuncGetAttributes(&attr, sort_small_kernel<double>);
  cudaFuncGetAttributes(&attr, sort_small_kernel<int64_t>);
  cudaFuncGetAttributes(&attr, sort_init_kernel);
  cudaFuncGetAttributes(&attr, sort_step_kernel<double>);
  cudaFuncGetAttributes(&attr, sort_step_kernel<int64_t>);
  cudaFuncGetAttributes(&attr, histc_kernel<float>);
  cudaFuncGetAttributes(&attr, histc_kernel<double>);
  cudaFuncGetAttributes(&attr, histc_int_kernel);
  cudaFuncGetAttributes(&attr, grouped_mm_kernel);
  return int(cudaGetLastError());
}

const bool kPreloaded = register_kernel_preload(&preload_moe_kernels);

}  // namespace

int launch_sort_lines_small(const SortLines& s, void* stream) {
  if (s.lines == 0 || s.k == 0) return 0;
  auto st = static_cast<cudaStream_t>(stream);
  const int P = int(pow2_at_least(s.n < 2 ? 2 : s.n));
  const int threads = P / 2 < 32 ? 32 : (P / 2 > 1024 ? 1024 : P / 2);
  const int blocks = int(s.lines < 65535 ? s.lines : 65535);
  if (integer_keys(s.type)) {
    const size_t shm = size_t(P) * (sizeof(int64_t) + sizeof(int));
    sort_small_kernel<int64_t><<<blocks, threads, shm, st>>>(s, P);
  } else {
    const size_t shm = size_t(P) * (sizeof(double) + sizeof(int));
    sort_small_kernel<double><<<blocks, threads, shm, st>>>(s, P);
  }
  return int(cudaGetLastError());
}

int launch_sort_lines_global(const SortLines& s, void* stream) {
  if (s.lines == 0 || s.n == 0) return 0;
  auto st = static_cast<cudaStream_t>(stream);
  sort_init_kernel<<<blocks_for(s.lines * s.n, 256), 256, 0, st>>>(s);
  const int64_t P = pow2_at_least(s.n);
  const int blocks = blocks_for(s.lines * (P / 2), 256);
  const bool ints = integer_keys(s.type);
  for (int64_t size = 2; size <= P; size <<= 1) {
    for (int64_t stride = size / 2; stride > 0; stride >>= 1) {
      const bool flip = stride == size / 2;
      if (ints) {
        sort_step_kernel<int64_t><<<blocks, 256, 0, st>>>(s, P, size, stride, flip);
      } else {
        sort_step_kernel<double><<<blocks, 256, 0, st>>>(s, P, size, stride, flip);
      }
    }
  }
  return int(cudaGetLastError());
}

int launch_histc(const HistcArgs& a, void* stream) {
  if (a.bins == 0) return 0;
  auto st = static_cast<cudaStream_t>(stream);
  if (a.type == PwType::i32 || a.type == PwType::i64 || a.type == PwType::i8 ||
      a.type == PwType::u32) {
    histc_int_kernel<<<1, kHistcThreads, 0, st>>>(a);
  } else if (a.type == PwType::f64) {
    histc_kernel<double><<<1, kHistcThreads, 0, st>>>(a);
  } else {
    histc_kernel<float><<<1, kHistcThreads, 0, st>>>(a);
  }
  return int(cudaGetLastError());
}

int launch_grouped_mm(const GroupedMmArgs& a, void* stream) {
  if (a.rows == 0 || a.n == 0) return 0;
  grouped_mm_kernel<<<blocks_for(a.rows * a.n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return int(cudaGetLastError());
}

}  // namespace symmflow::cuda
