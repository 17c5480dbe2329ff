// The rotary embedding kernel (rotary.hpp): one thread per output element, grid-stride. Element
// (..., j) reads x at j and at its partner j ± D/2 (rotate_half: -x[j + D/2] below the middle,
// x[j - D/2] above), cos and sin at j, each through its strides; x * cos and rotate_half(x) * sin
// round to the dtype (16-bit floats compute in float), then their sum, with round-to-nearest
// intrinsics so nothing contracts into an FMA: the bits of aten::mul, aten::neg, aten::cat and
// aten::add run one by one (Note [fused compute ops] in ops/fused/rotary_embedding.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/pointwise/rotary.hpp"
#include "kernels/cuda/pointwise/typed_access.cuh"

namespace symmflow::cuda {
namespace {

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

// v rounded to the storage type t and read back (what storing a product and loading it does).
template <typename A>
__device__ __forceinline__ A round_to(PwType t, A v) {
  switch (t) {
    case PwType::bf16: return A(__bfloat162float(__float2bfloat16_rn(float(v))));
    case PwType::f16: return A(__half2float(__float2half_rn(float(v))));
    default: return v;
  }
}

template <typename A>
__global__ void rotary_kernel(const __grid_constant__ RotaryArgs a) {
  const int last = a.nd - 1;
  const int64_t d = a.shape[last], half = d / 2;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.numel; i += step) {
    const int64_t j = i % d;
    int64_t rest = i / d, xo = 0, co = 0, so = 0, oo = 0;
    for (int k = last - 1; k >= 0; --k) {
      const int64_t ik = rest % a.shape[k];
      rest /= a.shape[k];
      xo += ik * a.x_strides[k];
      co += ik * a.cos_strides[k];
      so += ik * a.sin_strides[k];
      oo += ik * a.out_strides[k];
    }
    const A xj = ld<A>(a.x, a.type, xo + j * a.x_strides[last]);
    const A other = ld<A>(a.x, a.type, xo + (j < half ? j + half : j - half) * a.x_strides[last]);
    const A rot = j < half ? -other : other;
    const A p = round_to(a.type, mul_rn(xj, ld<A>(a.cos, a.type, co + j * a.cos_strides[last])));
    const A q = round_to(a.type, mul_rn(rot, ld<A>(a.sin, a.type, so + j * a.sin_strides[last])));
    st<A>(a.out, a.type, oo + j * a.out_strides[last], add_rn(p, q));
  }
}

}  // namespace

int launch_rotary(const RotaryArgs& args, void* stream) {
  if (args.numel == 0) return 0;
  const int threads = 256;
  const int64_t want = (args.numel + threads - 1) / threads;
  const int blocks = int(want < 4096 ? want : 4096);
  auto s = static_cast<cudaStream_t>(stream);
  if (args.type == PwType::f64) {
    rotary_kernel<double><<<blocks, threads, 0, s>>>(args);
  } else {
    rotary_kernel<float><<<blocks, threads, 0, s>>>(args);
  }
  return int(cudaGetLastError());
}

}  // namespace symmflow::cuda
