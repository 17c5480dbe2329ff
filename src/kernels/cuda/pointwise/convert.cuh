// to_f / from_f: a GPU element to float and back (bf16 and f16 round to nearest), shared by the
// kernels of the cuda backend.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace symmflow::cuda {
namespace {

template <typename T>
__device__ __forceinline__ float to_f(T x) {
  return float(x);
}
template <>
__device__ __forceinline__ float to_f(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float to_f(__half x) {
  return __half2float(x);
}
template <typename T>
__device__ __forceinline__ T from_f(float x) {
  return T(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f(float x) {
  return __float2half_rn(x);
}

}  // namespace
}  // namespace symmflow::cuda
