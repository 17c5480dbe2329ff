// Row kernels: sum/mean (one block per row; rows in blockIdx.x, grid-strided; over leading or
// middle dims, column sums: Note [column sums]), max (one warp per row, grid-strided), rms_norm
// (one block per row, a block-wide sum of squares: Note [rms_norm rows]), layer_norm (one block
// per row, a block-wide sum then one of squared deviations) and softmax (one thread per (outer,
// inner) column; rows of the last dim, the common case, take one warp each). The arithmetic
// follows the CPU kernels (kernels/cpu/reduce.cpp): 1 / sqrt(mean + eps), then x * scale * w; max,
// sum of exp(x - max), exp(x - max) / sum (log_softmax: x - max - log(sum)); float accumulation
// (double for f64), so results agree up to summation order; sums with an integer result accumulate
// in int64, exactly.
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

// Note [rms_norm rows]: one block per row, grid-strided; each thread keeps the first kRowCache of
// its elements (j = threadIdx.x + k * blockDim.x) in registers between the sum of squares and the
// scaled write, so a row of up to kRowCache * blockDim.x elements is read from memory once; the
// launcher picks blockDim.x so that a row fits (up to 8192 elements). When x, w and y have one
// float type it is a template argument (Note [typed elements] in typed_access.cuh), else each
// keeps its runtime type. Each thread sums its elements in the order of the loop before the
// block-wide sum, as before the cache.
constexpr int kRowCache = 8;

template <typename A, typename E>
__global__ void __launch_bounds__(1024)
    rms_norm_kernel(E x, E w, E y, int64_t rows, int64_t n, double eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * n;
    A v[kRowCache];
    A ss = 0;
#pragma unroll
    for (int k = 0; k < kRowCache; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
      v[k] = j < n ? x.template get<A>(base + j) : A(0);
      ss += v[k] * v[k];
    }
    const int64_t cached = int64_t(kRowCache) * blockDim.x;
    for (int64_t j = cached + threadIdx.x; j < n; j += blockDim.x) {
      const A t = x.template get<A>(base + j);
      ss += t * t;
    }
    ss = block_sum(ss);
    const A scale = A(1) / sqrt(ss / A(n) + A(eps));
#pragma unroll
    for (int k = 0; k < kRowCache; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * blockDim.x;
      if (j >= n) break;
      A o = v[k] * scale;
      if (w.p) o = o * w.template get<A>(j);
      y.set(base + j, o);
    }
    for (int64_t j = cached + threadIdx.x; j < n; j += blockDim.x) {
      A o = x.template get<A>(base + j) * scale;
      if (w.p) o = o * w.template get<A>(j);
      y.set(base + j, o);
    }
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

template <typename A, typename E>
__global__ void row_sum_kernel(E x, void* y, PwType yt, int64_t rows, int64_t n, bool mean) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    A acc = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) acc += x.template get<A>(r * n + j);
    acc = block_sum(acc);
    if (threadIdx.x == 0) st(y, yt, r, mean ? acc / A(n) : acc);
  }
}

// Note [column sums]: a sum (or mean) over a run of adjacent dims of a contiguous tensor that ends
// before its last dim, x as [O, R, C] reduced over R (the weight gradient of a norm or a bias:
// [B, S, H] summed over B and S, O = 1; the gradient of GQA's repeated key heads: [B, Hkv, n, S, D]
// summed over n), runs without first copying x with the reduced dims last (one block per
// 4-element row then took 365 us for one layer's keys at 4 x 512 tokens on an H200). A block of
// 32 x 8 threads owns 32 adjacent columns (a warp reads 32 consecutive elements of a row) and a
// split of the rows; its 8 partial sums of a column are added in shared memory; the O blocks of x
// take gridDim.z, grid-strided. With one split the block writes y; with several each writes its
// float (double, int64) partial to a workspace and col_sum_finish adds the splits in order: the
// result does not depend on timing. Splits are chosen so that about 2048 blocks run, each over at
// least 32 rows; 16 rows or fewer take one thread per output (col_sum_narrow).
constexpr int kColTile = 32, kColRows = 8;

template <typename A, typename E>
__global__ void col_sum_kernel(E x, void* y, PwType yt, A* part, int64_t outer,
                               int64_t rows, int64_t cols, int64_t rows_per_split, bool mean) {
  __shared__ A tile[kColRows][kColTile + 1];
  const int64_t c = int64_t(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_split;
  const int64_t r1 = r0 + rows_per_split < rows ? r0 + rows_per_split : rows;
  for (int64_t o = blockIdx.z; o < outer; o += gridDim.z) {
    const int64_t base = o * rows * cols;
    A acc = 0;
    if (c < cols) {
      for (int64_t r = r0 + threadIdx.y; r < r1; r += kColRows) {
        acc += x.template get<A>(base + r * cols + c);
      }
    }
    tile[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
      A sum = 0;
      for (int k = 0; k < kColRows; ++k) sum += tile[k][threadIdx.x];
      if (part) {
        part[(o * gridDim.y + blockIdx.y) * cols + c] = sum;
      } else {
        st(y, yt, o * cols + c, mean ? sum / A(rows) : sum);
      }
    }
    __syncthreads();
  }
}

// Few rows (GQA's repeated heads: 4): one thread per output, its rows read `cols` apart, so a warp
// reads 32 consecutive elements of each row (a 32 x 8 block's tile of 4 rows left half its
// threads idle and made 65536 blocks of 128 elements: 88 us for one layer's keys at 4 x 512).
template <typename A, typename E>
__global__ void col_sum_narrow(E x, void* y, PwType yt, int64_t outer, int64_t rows, int64_t cols,
                               bool mean) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < outer * cols; i += step) {
    const int64_t o = i / cols, c = i % cols;
    const int64_t base = o * rows * cols + c;
    A sum = 0;
    for (int64_t r = 0; r < rows; ++r) sum += x.template get<A>(base + r * cols);
    st(y, yt, i, mean ? sum / A(rows) : sum);
  }
}

template <typename A>
__global__ void col_sum_finish(const A* part, int64_t splits, void* y, PwType yt, int64_t outer,
                               int64_t rows, int64_t cols, bool mean) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < outer * cols; i += step) {
    const int64_t o = i / cols, c = i % cols;
    A sum = 0;
    for (int64_t k = 0; k < splits; ++k) sum += part[(o * splits + k) * cols + c];
    st(y, yt, i, mean ? sum / A(rows) : sum);
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
template <typename A, typename E>
__global__ void softmax_rows(E x, E y, int64_t rows, int64_t n, bool log_out) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t base = row * n;
  A mx = -INFINITY;
  for (int64_t j = lane; j < n; j += 32) mx = max(mx, x.template get<A>(base + j));
  for (int o = 16; o > 0; o /= 2) mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  A sum = 0;
  for (int64_t j = lane; j < n; j += 32) sum += exp(x.template get<A>(base + j) - mx);
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (log_out) {
    const A lse = log(sum);
    for (int64_t j = lane; j < n; j += 32) y.set(base + j, x.template get<A>(base + j) - mx - lse);
    return;
  }
  for (int64_t j = lane; j < n; j += 32) {
    y.set(base + j, exp(x.template get<A>(base + j) - mx) / sum);
  }
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
  // Note [rms_norm rows]: enough threads that a row fits the register cache, 32 to 1024.
  const int64_t want = (n + kRowCache - 1) / kRowCache;
  const int threads = want >= 1024 ? 1024 : int((want + 31) / 32 * 32);
  const unsigned blocks = unsigned(rows < 65535 ? rows : 65535);
  const bool one_type = yt == xt && (w == nullptr || wt == xt);
  with_elem(one_type ? xt : PwType::boolean, [&](auto tag) {
    using E = decltype(tag);
    const E ex{x, xt}, ew{w, wt}, ey{y, yt};
    if (xt == PwType::f64) {
      rms_norm_kernel<double><<<blocks, threads, 0, s>>>(ex, ew, ey, rows, n, eps);
    } else {
      rms_norm_kernel<float><<<blocks, threads, 0, s>>>(ex, ew, ey, rows, n, eps);
    }
  });
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

namespace {

bool integer_result(PwType yt) {
  return yt == PwType::i64 || yt == PwType::i32 || yt == PwType::i8 || yt == PwType::u32;
}

// Note [column sums]: the number of row splits.
constexpr int64_t kNarrowRows = 16;  // and fewer: col_sum_narrow

int64_t col_sum_splits(int64_t outer, int64_t rows, int64_t cols) {
  const int64_t tiles = (cols + kColTile - 1) / kColTile * (outer < 65535 ? outer : 65535);
  int64_t splits = (2048 + tiles - 1) / tiles;
  const int64_t most = (rows + 31) / 32;
  if (splits > most) splits = most;
  if (splits > 65535) splits = 65535;
  if (splits < 1) splits = 1;
  const int64_t per = (rows + splits - 1) / splits;
  return per == 0 ? 1 : (rows + per - 1) / per;
}

template <typename A>
int col_sum(const void* x, PwType xt, void* y, PwType yt, int64_t outer, int64_t rows,
            int64_t cols, bool mean, void* workspace, cudaStream_t s) {
  if (rows <= kNarrowRows) {
    const int64_t want = (outer * cols + 255) / 256;
    with_elem(xt, [&](auto tag) {
      const decltype(tag) ex{x, xt};
      col_sum_narrow<A><<<unsigned(want < 8192 ? want : 8192), 256, 0, s>>>(ex, y, yt, outer, rows,
                                                                            cols, mean);
    });
    return int(cudaGetLastError());
  }
  const int64_t splits = col_sum_splits(outer, rows, cols);
  const int64_t per = splits == 1 ? (rows > 0 ? rows : 1) : (rows + splits - 1) / splits;
  A* part = splits > 1 ? static_cast<A*>(workspace) : nullptr;
  const dim3 grid(unsigned((cols + kColTile - 1) / kColTile), unsigned(splits),
                  unsigned(outer < 65535 ? outer : 65535));
  with_elem(xt, [&](auto tag) {
    const decltype(tag) ex{x, xt};
    col_sum_kernel<A><<<grid, dim3(kColTile, kColRows), 0, s>>>(ex, y, yt, part, outer, rows, cols,
                                                                 per, mean);
  });
  if (part) {
    const int64_t want = (outer * cols + 255) / 256;
    col_sum_finish<A><<<unsigned(want < 4096 ? want : 4096), 256, 0, s>>>(part, splits, y, yt,
                                                                          outer, rows, cols, mean);
  }
  return int(cudaGetLastError());
}

}  // namespace

int64_t col_sum_workspace_bytes(int64_t outer, int64_t rows, int64_t cols, PwType xt, PwType yt) {
  if (cols == 0 || outer == 0 || rows <= kNarrowRows) return 0;
  const int64_t splits = col_sum_splits(outer, rows, cols);
  const int64_t acc = integer_result(yt) || xt == PwType::f64 ? 8 : 4;
  return splits > 1 ? outer * splits * cols * acc : 0;
}

int launch_col_sum(const void* x, PwType xt, void* y, PwType yt, int64_t outer, int64_t rows,
                   int64_t cols, bool mean, void* workspace, void* stream) {
  if (cols == 0 || outer == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  if (integer_result(yt)) {
    return col_sum<int64_t>(x, xt, y, yt, outer, rows, cols, false, workspace, s);
  }
  if (xt == PwType::f64) {
    return col_sum<double>(x, xt, y, yt, outer, rows, cols, mean, workspace, s);
  }
  return col_sum<float>(x, xt, y, yt, outer, rows, cols, mean, workspace, s);
}

int launch_row_sum(const void* x, PwType xt, void* y, PwType yt, int64_t rows, int64_t n,
                   bool mean, void* stream) {
  if (rows == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  const int threads = n >= 256 ? 256 : 32;
  const unsigned blocks = unsigned(rows < 65535 ? rows : 65535);
  with_elem(xt, [&](auto tag) {
    const decltype(tag) ex{x, xt};
    if (integer_result(yt)) {  // Note [integer sums on GPUs] (aten_norm.cpp): exact, wrapping
      row_sum_kernel<int64_t><<<blocks, threads, 0, s>>>(ex, y, yt, rows, n, false);
    } else if (xt == PwType::f64) {
      row_sum_kernel<double><<<blocks, threads, 0, s>>>(ex, y, yt, rows, n, mean);
    } else {
      row_sum_kernel<float><<<blocks, threads, 0, s>>>(ex, y, yt, rows, n, mean);
    }
  });
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
    with_elem(yt == xt ? xt : PwType::boolean, [&](auto tag) {
      using E = decltype(tag);
      const E ex{x, xt}, ey{y, yt};
      if (wide) softmax_rows<double><<<blocks, 256, 0, s>>>(ex, ey, outer, n, log_out);
      else softmax_rows<float><<<blocks, 256, 0, s>>>(ex, ey, outer, n, log_out);
    });
  } else {
    const unsigned blocks = unsigned((outer * inner + 255) / 256);
    if (wide)
      softmax_columns<double><<<blocks, 256, 0, s>>>(x, xt, y, yt, outer, n, inner, log_out);
    else softmax_columns<float><<<blocks, 256, 0, s>>>(x, xt, y, yt, outer, n, inner, log_out);
  }
  return int(cudaGetLastError());
}

}  // namespace symmflow::cuda
