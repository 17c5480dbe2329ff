// The ordered GEMM (ordered_gemm.hpp): a block of 16 x 16 threads owns a 16 x 16 tile of c; it
// walks k in tiles of 16, staging a's and b's tiles in shared memory, and each thread adds its
// element's products in k order. The grid's third dimension is the batch (grid-strided).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "kernels/cuda/gemm/ordered_gemm.hpp"
#include "kernels/cuda/pointwise/convert.cuh"

namespace symmflow::cuda {
namespace {

constexpr int kTile = 16;

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
__device__ __forceinline__ Acc<T> load(const T* p, int64_t at) {
  if constexpr (std::is_same_v<T, double>) {
    return p[at];
  } else {
    return to_f(p[at]);
  }
}

template <typename T>
__device__ __forceinline__ T round_to(Acc<T> v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return from_f<T>(v);
  }
}

template <typename T>
__global__ void __launch_bounds__(kTile * kTile) ordered_gemm_kernel(OrderedGemm g) {
  using A = Acc<T>;
  __shared__ A as[kTile][kTile + 1];
  __shared__ A bs[kTile][kTile + 1];
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  const int64_t i = int64_t(blockIdx.y) * kTile + ty, j = int64_t(blockIdx.x) * kTile + tx;
  const T* a = static_cast<const T*>(g.a);
  const T* b = static_cast<const T*>(g.b);
  T* c = static_cast<T*>(g.c);
  for (int64_t z = blockIdx.z; z < g.batch; z += gridDim.z) {
    A acc = 0;
    for (int64_t k0 = 0; k0 < g.k; k0 += kTile) {
      const int64_t ak = k0 + tx, bk = k0 + ty;
      as[ty][tx] = i < g.m && ak < g.k ? load(a, z * g.a_batch + i * g.a_row + ak * g.a_col) : A(0);
      bs[ty][tx] = j < g.n && bk < g.k ? load(b, z * g.b_batch + bk * g.b_row + j * g.b_col) : A(0);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kTile; ++kk) acc += as[ty][kk] * bs[kk][tx];
      __syncthreads();
    }
    if (i < g.m && j < g.n) {
      T* out = c + z * g.c_batch + i * g.c_row + j;
      const A v = g.beta != 0 ? A(g.alpha) * acc + A(g.beta) * load(out, 0) : A(g.alpha) * acc;
      *out = round_to<T>(v);
    }
  }
}

template <typename T>
cudaError_t launch(const OrderedGemm& g, cudaStream_t s) {
  const dim3 block(kTile, kTile);
  const dim3 grid(unsigned((g.n + kTile - 1) / kTile), unsigned((g.m + kTile - 1) / kTile),
                  unsigned(g.batch < 65535 ? g.batch : 65535));
  ordered_gemm_kernel<T><<<grid, block, 0, s>>>(g);
  return cudaGetLastError();
}

}  // namespace

int launch_ordered_gemm(const OrderedGemm& g, void* stream) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  switch (g.type) {
    case GemmType::f32:
      return int(launch<float>(g, s));
    case GemmType::f64:
      return int(launch<double>(g, s));
    case GemmType::bf16:
      return int(launch<__nv_bfloat16>(g, s));
    case GemmType::f16:
      return int(launch<__half>(g, s));
  }
  return int(cudaErrorInvalidValue);
}

}  // namespace symmflow::cuda
