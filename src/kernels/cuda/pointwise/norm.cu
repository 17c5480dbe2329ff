// Row kernels: sum/mean (one block per row; rows in blockIdx.x, grid-strided), max (one warp per
// row, grid-strided), rms_norm (one block per row, a block-wide sum of squares), layer_norm (one
// block per row, a block-wide sum then one of squared deviations) and softmax (one
// thread
// per (outer, inner) column; rows of the last dim, the common case, take one warp each). The
// arithmetic follows the CPU kernels (kernels/cpu/reduce.cpp): 1 / sqrt(mean + eps), then
// x * scale * w; max, sum of exp(x - max), exp(x - max) / sum (log_softmax: x - max - log(sum));
// float accumulation (double for f64), so results agree up to summation order; sums with an integer
// result accumulate in int64, exactly.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/pointwise/norm.hpp"
#include "kernels/cuda/pointwise/typed_access.cuh"

namespace symmflow::cuda {
namespace {

template <typename A>
__device__ A block_sum(A v) {
  __shared__ A partial[32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = threadIdx.x < warps ? partial[threadIdx.x] : A(0);
  if (warp == 0) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) partial[0] = v;
  }
  __syncthreads();
  A total = partial[0];
  __syncthreads();
  return total;
}

template <typename A>
__global__ void rms_norm_kernel(const void* x, PwType xt, const void* w, PwType wt, void* y,
                                PwType yt, int64_t n, double eps) {
  const int64_t base = int64_t(blockIdx.x) * n;
  A ss = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    A v = ld<A>(x, xt, base + j);
    ss += v * v;
  }
  ss = block_sum(ss);
  const A scale = A(1) / sqrt(ss / A(n) + A(eps));
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    A v = ld<A>(x, xt, base + j) * scale;
    if (w) v = v * ld<A>(w, wt, j);
    st(y, yt, base + j, v);
  }
}

// Rows grid-strided (one block each); y has x's type, mean and rstd are A.
template <typename A>
__global__ void layer_norm_kernel(const void* x, PwType xt, const void* w, PwType wt,
                                  const void* b, PwType bt, void* y, A* mean, A* rstd,
                                  int64_t rows, int64_t n, double eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * n;
    if (n == 0) {
      if (threadIdx.x == 0) {
        mean[r] = A(0);
        rstd[r] = A(NAN);
      }
      continue;
    }
    A sum = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += ld<A>(x, xt, base + j);
    const A mu = block_sum(sum) / A(n);
    A ss = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const A d = ld<A>(x, xt, base + j) - mu;
      ss += d * d;
    }
    const A rs = A(1) / sqrt(block_sum(ss) / A(n) + A(eps));
    if (threadIdx.x == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      A v = (ld<A>(x, xt, base + j) - mu) * rs;
      if (w) v = v * ld<A>(w, wt, j);
      if (b) v = v + ld<A>(b, bt, j);
      st(y, xt, base + j, v);
    }
  }
}

template <typename A>
__global__ void row_sum_kernel(const void* x, PwType xt, void* y, PwType yt, int64_t rows,
                               int64_t n, bool mean) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    A acc = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) acc += ld<A>(x, xt, r * n + j);
    acc = block_sum(acc);
    if (threadIdx.x == 0) st(y, yt, r, mean ? acc / A(n) : acc);
  }
}

// The larger of a and b; NaN wins (amax propagates NaN, as on the CPU).
template <typename A>
__device__ __forceinline__ A max_nan(A a, A b) {
  return (b != b || b > a) ? b : a;
}

// y[r] = max of x[r, :]; one warp per row, rows grid-strided.
template <typename A>
__global__ void row_max_kernel(const void* x, PwType xt, void* y, PwType yt, int64_t rows,
                               int64_t n) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    A m = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += 32) m = max_nan(m, ld<A>(x, xt, r * n + j));
    for (int o = 16; o > 0; o /= 2) m = max_nan(m, A(__shfl_xor_sync(0xffffffffu, m, o)));
    if (threadIdx.x == 0) st(y, yt, r, m);
  }
}

// One warp per row of n (inner == 1).
template <typename A>
__global__ void softmax_rows(const void* x, PwType xt, void* y, PwType yt, int64_t rows,
                             int64_t n, bool log_out) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t base = row * n;
  A mx = -INFINITY;
  for (int64_t j = lane; j < n; j += 32) mx = max(mx, ld<A>(x, xt, base + j));
  for (int o = 16; o > 0; o /= 2) mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  A sum = 0;
  for (int64_t j = lane; j < n; j += 32) sum += exp(ld<A>(x, xt, base + j) - mx);
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (log_out) {
    const A lse = log(sum);
    for (int64_t j = lane; j < n; j += 32) st(y, yt, base + j, ld<A>(x, xt, base + j) - mx - lse);
    return;
  }
  for (int64_t j = lane; j < n; j += 32) st(y, yt, base + j, exp(ld<A>(x, xt, base + j) - mx) / sum);
}

template <typename A>
__global__ void softmax_columns(const void* x, PwType xt, void* y, PwType yt, int64_t outer,
                                int64_t n, int64_t inner, bool log_out) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= outer * inner) return;
  const int64_t base = (c / inner) * n * inner + c % inner;
  A mx = -INFINITY, sum = 0;
  for (int64_t i = 0; i < n; ++i) mx = max(mx, ld<A>(x, xt, base + i * inner));
  for (int64_t i = 0; i < n; ++i) sum += exp(ld<A>(x, xt, base + i * inner) - mx);
  if (log_out) {
    const A lse = log(sum);
    for (int64_t i = 0; i < n; ++i)
      st(y, yt, base + i * inner, ld<A>(x, xt, base + i * inner) - mx - lse);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    st(y, yt, base + i * inner, exp(ld<A>(x, xt, base + i * inner) - mx) / sum);
}

}  // namespace

int launch_rms_norm(const void* x, PwType xt, const void* w, PwType wt, void* y, PwType yt,
                    int64_t rows, int64_t n, double eps, void* stream) {
  if (rows == 0 || n == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  const int threads = n >= 1024 ? 1024 : int((n + 31) / 32 * 32);
  for (int64_t r = 0; r < rows; r += 65535) {  // grid.x limit per launch
    const int64_t part = rows - r < 65535 ? rows - r : 65535;
    const int64_t off = r * n;
    auto at = [&](const void* p, PwType t) {
      return static_cast<const char*>(p) + off * (t == PwType::f32 ? 4 : t == PwType::f64 ? 8 : 2);
    };
    void* yo = const_cast<char*>(at(y, yt));
    if (xt == PwType::f64) {
      rms_norm_kernel<double><<<unsigned(part), threads, 0, s>>>(at(x, xt), xt, w, wt, yo, yt, n, eps);
    } else {
      rms_norm_kernel<float><<<unsigned(part), threads, 0, s>>>(at(x, xt), xt, w, wt, yo, yt, n, eps);
    }
  }
  return int(cudaGetLastError());
}

int launch_layer_norm(const void* x, PwType xt, const void* w, PwType wt, const void* b, PwType bt,
                      void* y, void* mean, void* rstd, int64_t rows, int64_t n, double eps,
                      void* stream) {
  if (rows == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  const int threads = n >= 1024 ? 1024 : n <= 32 ? 32 : int((n + 31) / 32 * 32);
  const unsigned blocks = unsigned(rows < 65535 ? rows : 65535);
  if (xt == PwType::f64) {
    layer_norm_kernel<double><<<blocks, threads, 0, s>>>(x, xt, w, wt, b, bt, y,
                                                         static_cast<double*>(mean),
                                                         static_cast<double*>(rstd), rows, n, eps);
  } else {
    layer_norm_kernel<float><<<blocks, threads, 0, s>>>(x, xt, w, wt, b, bt, y,
                                                        static_cast<float*>(mean),
                                                        static_cast<float*>(rstd), rows, n, eps);
  }
  return int(cudaGetLastError());
}

int launch_row_sum(const void* x, PwType xt, void* y, PwType yt, int64_t rows, int64_t n,
                   bool mean, void* stream) {
  if (rows == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  const int threads = n >= 256 ? 256 : 32;
  const unsigned blocks = unsigned(rows < 65535 ? rows : 65535);
  const bool integer_sum = yt == PwType::i64 || yt == PwType::i32 || yt == PwType::i8 ||
                           yt == PwType::u32;
  if (integer_sum) {  // Note [integer sums on GPUs] (aten_norm.cpp): exact, wrapping
    row_sum_kernel<int64_t><<<blocks, threads, 0, s>>>(x, xt, y, yt, rows, n, false);
  } else if (xt == PwType::f64) {
    row_sum_kernel<double><<<blocks, threads, 0, s>>>(x, xt, y, yt, rows, n, mean);
  } else {
    row_sum_kernel<float><<<blocks, threads, 0, s>>>(x, xt, y, yt, rows, n, mean);
  }
  return int(cudaGetLastError());
}

int launch_row_max(const void* x, PwType xt, void* y, PwType yt, int64_t rows, int64_t n,
                   void* stream) {
  if (rows == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  const unsigned blocks = unsigned(rows < 65535 ? rows : 65535);
  if (xt == PwType::f64) {
    row_max_kernel<double><<<blocks, 32, 0, s>>>(x, xt, y, yt, rows, n);
  } else {
    row_max_kernel<float><<<blocks, 32, 0, s>>>(x, xt, y, yt, rows, n);
  }
  return int(cudaGetLastError());
}

int launch_softmax(const void* x, PwType xt, void* y, PwType yt, int64_t outer, int64_t n,
                   int64_t inner, bool log_out, void* stream) {
  if (outer == 0 || n == 0 || inner == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  const bool wide = xt == PwType::f64;
  if (inner == 1) {
    const unsigned blocks = unsigned((outer + 7) / 8);
    if (wide) softmax_rows<double><<<blocks, 256, 0, s>>>(x, xt, y, yt, outer, n, log_out);
    else softmax_rows<float><<<blocks, 256, 0, s>>>(x, xt, y, yt, outer, n, log_out);
  } else {
    const unsigned blocks = unsigned((outer * inner + 255) / 256);
    if (wide)
      softmax_columns<double><<<blocks, 256, 0, s>>>(x, xt, y, yt, outer, n, inner, log_out);
    else softmax_columns<float><<<blocks, 256, 0, s>>>(x, xt, y, yt, outer, n, inner, log_out);
  }
  return int(cudaGetLastError());
}

}  // namespace symmflow::cuda
