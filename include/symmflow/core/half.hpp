// 16-bit floating point storage types: IEEE binary16 (`Half`) and bfloat16 (`BFloat16`).
// Arithmetic happens in float; conversion from float rounds to nearest even, NaN stays NaN.
#pragma once

#include <bit>
#include <cstdint>

namespace symmflow {

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a builtin float type
  operator float() const { return std::bit_cast<float>(uint32_t(bits) << 16); }

  static uint16_t from_float(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return uint16_t((u + rounding) >> 16);
  }
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(from_float(f)) {}  // NOLINT
  operator float() const { return to_float(bits); }

  static uint16_t from_float(float f);
  static float to_float(uint16_t h);
  static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

inline float Half::to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (man == 0) {
      out = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      out = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    out = sign | 0x7f800000u | man << 13;
  } else {
    out = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  return std::bit_cast<float>(out);
}

inline uint16_t Half::from_float(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;      // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;     // overflow rounds to inf
  if (abs < 0x38800000u) {                           // result is subnormal or zero
    if (abs < 0x33000000u) return sign;              // below half the smallest subnormal
    uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    int shift = 113 - int(abs >> 23) + 13;           // 126 - exp + 10 ... aligned to 2^-24
    uint32_t half_man = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_man & 1u))) ++half_man;
    return sign | uint16_t(half_man);
  }
  uint32_t rounding = 0xfffu + ((abs >> 13) & 1u);
  abs += rounding;
  return sign | uint16_t(((abs >> 13) - ((127 - 15) << 10)) & 0xffffu);
}

}  // namespace symmflow
