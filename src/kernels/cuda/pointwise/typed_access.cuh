// ld / st: an element of a runtime dtype read into and written from an accumulator type A, shared
// by the kernels that take their dtype at run time. ld reads every dtype (float or double, or
// int64_t for the integer ones: elementwise, sort keys; a bool reads 0 or 1). st writes the float
// dtypes (bf16 and f16 round to nearest) and the integer ones (converted), not bool: callers
// refuse it on the host first.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/pointwise/pointwise.hpp"

namespace symmflow::cuda {
namespace {

template <typename A>
__device__ __forceinline__ A ld(const void* p, PwType t, int64_t i) {
  switch (t) {
    case PwType::f32: return A(static_cast<const float*>(p)[i]);
    case PwType::f64: return A(static_cast<const double*>(p)[i]);
    case PwType::bf16: return A(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
    case PwType::f16: return A(__half2float(static_cast<const __half*>(p)[i]));
    case PwType::i32: return A(static_cast<const int32_t*>(p)[i]);
    case PwType::i64: return A(static_cast<const int64_t*>(p)[i]);
    case PwType::i8: return A(static_cast<const int8_t*>(p)[i]);
    case PwType::u32: return A(static_cast<const uint32_t*>(p)[i]);
    case PwType::boolean: return A(static_cast<const bool*>(p)[i] ? 1 : 0);
  }
  return A(0);
}

template <typename A>
__device__ __forceinline__ void st(void* p, PwType t, int64_t i, A v) {
  switch (t) {
    case PwType::f32: static_cast<float*>(p)[i] = float(v); return;
    case PwType::f64: static_cast<double*>(p)[i] = double(v); return;
    case PwType::bf16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(float(v)); return;
    case PwType::f16: static_cast<__half*>(p)[i] = __float2half_rn(float(v)); return;
    case PwType::i32: static_cast<int32_t*>(p)[i] = int32_t(v); return;
    case PwType::i64: static_cast<int64_t*>(p)[i] = int64_t(v); return;
    case PwType::i8: static_cast<int8_t*>(p)[i] = int8_t(v); return;
    case PwType::u32: static_cast<uint32_t*>(p)[i] = uint32_t(v); return;
    default: return;
  }
}

}  // namespace
}  // namespace symmflow::cuda
