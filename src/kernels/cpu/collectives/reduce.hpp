// Rank-order reduction loops of the cpu collectives.
//
// Contract: reduce_rank_order<T, Op>(srcs, n, dst, count, divisor) computes, for every element i,
//   acc = srcs[0][i]; acc = op(acc, srcs[1][i]); ... op(acc, srcs[n-1][i])   (in acc_t<T>)
// then, for avg, acc / divisor (integer division for integers), and stores acc rounded once to T
// in dst[i]. The order of the sources is the order of the ranks, so every rank that reduces the
// same element gets the same bits (DESIGN.md: "Reductions add in rank order"). dst may alias
// srcs[k] element for element (each chunk is read completely before it is stored). No allocation:
// the accumulator is a stack chunk of kChunkBytes, so peers' data streams through L1 once.
//
// 16-bit floats are loaded and stored with branch-free conversions (bit manipulation the compiler
// vectorizes); they give exactly the bits of BFloat16 / Half in core/half.hpp (tested).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "symmflow/core/dtype.hpp"

namespace symmflow::cpu {

enum class ReduceOp { sum, avg, max, min };

inline constexpr std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

inline constexpr int64_t kChunkBytes = 8192;

// Branch-free 16-bit float conversions (vectorizable; exact, round to nearest even).
inline float bf16_bits_to_float(uint16_t b) {
  return std::bit_cast<float>(uint32_t(b) << 16);
}

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = (u >> 16) | 0x40u;
  // Signed compares on values below 2^31 (SSE2 has no unsigned compare to vectorize).
  return uint16_t(int32_t(u & 0x7fffffffu) > int32_t(0x7f800000) ? nan : rounded);
}

// After Maratyszcza's FP16 library (fp16_ieee_to_fp32_value / fp16_ieee_from_fp32_value).
inline float half_bits_to_float(uint16_t h) {
  uint32_t w = uint32_t(h) << 16;
  uint32_t sign = w & 0x80000000u;
  uint32_t two_w = w + w;
  float normalized = std::bit_cast<float>((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  float denormalized = std::bit_cast<float>((two_w >> 17) | (126u << 23)) - 0.5f;
  uint32_t small = 0u - uint32_t((two_w >> 27) == 0);  // all ones for zero and subnormals
  uint32_t bits = (std::bit_cast<uint32_t>(denormalized) & small) |
                  (std::bit_cast<uint32_t>(normalized) & ~small);
  return std::bit_cast<float>(sign | bits);
}

inline uint16_t float_to_half_bits(float f) {
  float base =
      (std::bit_cast<float>(std::bit_cast<uint32_t>(f) & 0x7fffffffu) * 0x1.0p+112f) * 0x1.0p-110f;
  uint32_t w = std::bit_cast<uint32_t>(f);
  uint32_t shl1_w = w + w;
  uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  uint32_t low = 0u - uint32_t(int32_t(bias >> 24) < 0x71);
  bias = (0x71000000u & low) | (bias & ~low);
  base = std::bit_cast<float>((bias >> 1) + 0x07800000u) + base;
  uint32_t bits = std::bit_cast<uint32_t>(base);
  uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  uint32_t mantissa_bits = bits & 0x00000FFFu;
  uint32_t nonsign = exp_bits + mantissa_bits;
  uint32_t nan = 0u - uint32_t(int32_t(w & 0x7fffffffu) > int32_t(0x7f800000));
  return uint16_t((sign >> 16) | (0x7E00u & nan) | (nonsign & ~nan));
}

// Storage type as the loops see it (16-bit floats as their bits) and the conversions to acc_t.
template <typename T>
struct Elem {
  using Raw = T;
  static T load(Raw v) { return v; }
  static Raw store(T v) { return v; }
};
template <>
struct Elem<BFloat16> {
  using Raw = uint16_t;
  static float load(Raw v) { return bf16_bits_to_float(v); }
  static Raw store(float v) { return float_to_bf16_bits(v); }
};
template <>
struct Elem<Half> {
  using Raw = uint16_t;
  static float load(Raw v) { return half_bits_to_float(v); }
  static Raw store(float v) { return float_to_half_bits(v); }
};

template <ReduceOp Op, typename A>
inline A combine(A acc, A v) {
  if constexpr (Op == ReduceOp::max) {
    return acc < v ? v : acc;
  } else if constexpr (Op == ReduceOp::min) {
    return v < acc ? v : acc;
  } else {
    return acc + v;
  }
}

template <typename T, ReduceOp Op>
void reduce_rank_order(const void* const* srcs, int n, void* dst, int64_t count, int64_t divisor) {
  using A = acc_t<T>;
  using E = Elem<T>;
  using Raw = typename E::Raw;
  constexpr int64_t kChunk = kChunkBytes / int64_t(sizeof(A));
  alignas(64) A acc[kChunk];
  Raw* __restrict out = static_cast<Raw*>(dst);
  for (int64_t start = 0; start < count; start += kChunk) {
    const int64_t len = std::min(kChunk, count - start);
    {
      const Raw* __restrict s = static_cast<const Raw*>(srcs[0]) + start;
      for (int64_t i = 0; i < len; ++i) acc[i] = E::load(s[i]);
    }
    for (int p = 1; p < n; ++p) {
      const Raw* __restrict s = static_cast<const Raw*>(srcs[p]) + start;
      for (int64_t i = 0; i < len; ++i) acc[i] = combine<Op>(acc[i], A(E::load(s[i])));
    }
    if constexpr (Op == ReduceOp::avg) {
      const A d = A(divisor);
      for (int64_t i = 0; i < len; ++i) acc[i] = acc[i] / d;
    }
    Raw* __restrict o = out + start;
    for (int64_t i = 0; i < len; ++i) o[i] = E::store(acc[i]);
  }
}

using ReduceFn = void (*)(const void* const* srcs, int n, void* dst, int64_t count,
                          int64_t divisor);

template <typename T>
ReduceFn reduce_fn_for(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return &reduce_rank_order<T, ReduceOp::sum>;
    case ReduceOp::avg:
      return &reduce_rank_order<T, ReduceOp::avg>;
    case ReduceOp::max:
      return &reduce_rank_order<T, ReduceOp::max>;
    case ReduceOp::min:
      return &reduce_rank_order<T, ReduceOp::min>;
  }
  return nullptr;
}

// The loop for (dtype, op); nullptr for a dtype the reductions do not support.
inline ReduceFn reduce_fn(DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32:
      return reduce_fn_for<float>(op);
    case DType::bf16:
      return reduce_fn_for<BFloat16>(op);
    case DType::f16:
      return reduce_fn_for<Half>(op);
    case DType::f64:
      return reduce_fn_for<double>(op);
    case DType::i32:
      return reduce_fn_for<int32_t>(op);
    case DType::i64:
      return reduce_fn_for<int64_t>(op);
    default:
      return nullptr;
  }
}

}  // namespace symmflow::cpu
