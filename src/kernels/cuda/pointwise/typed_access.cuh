// ld / st: an element of a runtime dtype read into and written from an accumulator type A, shared
// by the kernels that take their dtype at run time. ld reads every dtype (float or double, or
// int64_t for the integer ones: elementwise, sort keys; a bool reads 0 or 1). st writes the float
// dtypes (bf16 and f16 round to nearest) and the integer ones (converted), not bool: callers
// refuse it on the host first.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

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


// Note [typed elements]: a kernel that reads a runtime dtype through ld/st switches on it at every
// element; the switch compiles to an indirect branch, and row kernels built on it ran at a third
// to a sixth of the GPU's bandwidth (rms_norm of 2048 x 4096 bf16 rows: 48 us on an H200). Elem<T>
// is an operand whose storage type T is a template argument (float, double, __nv_bfloat16,
// __half), or void for the runtime type: kernels are instantiated for the float types the
// launchers see in models, and keep one runtime-typed instantiation for the rest.
template <typename A, typename T>
__device__ __forceinline__ A load_as(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return A(__bfloat162float(p[i]));
  } else if constexpr (std::is_same_v<T, __half>) {
    return A(__half2float(p[i]));
  } else {
    return A(p[i]);
  }
}

template <typename T, typename A>
__device__ __forceinline__ T stored(A v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(float(v));
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(float(v));
  } else {
    return T(v);
  }
}

template <typename T>
struct Elem {
  const void* p;
  PwType t;
  template <typename A>
  __device__ __forceinline__ A get(int64_t i) const {
    if constexpr (std::is_void_v<T>) {
      return ld<A>(p, t, i);
    } else {
      return load_as<A>(static_cast<const T*>(p), i);
    }
  }
  template <typename A>
  __device__ __forceinline__ void set(int64_t i, A v) const {
    if constexpr (std::is_void_v<T>) {
      st(const_cast<void*>(p), t, i, v);
    } else {
      static_cast<T*>(const_cast<void*>(p))[i] = stored<T>(v);
    }
  }
};

// Calls f(Elem<T>{}) with T the storage type of t when it is a float type, else with Elem<void>.
template <typename F>
void with_elem(PwType t, F&& f) {
  switch (t) {
    case PwType::f32: f(Elem<float>{}); return;
    case PwType::f64: f(Elem<double>{}); return;
    case PwType::bf16: f(Elem<__nv_bfloat16>{}); return;
    case PwType::f16: f(Elem<__half>{}); return;
    default: f(Elem<void>{}); return;
  }
}

}  // namespace
}  // namespace symmflow::cuda
