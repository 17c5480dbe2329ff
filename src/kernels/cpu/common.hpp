// Shared pieces of the CPU aten kernels: element conversion, dtype-converting strided copies,
// scalar extraction and the "compute into a temporary when the destination cannot take the result
// directly" pattern used by the out/in-place variants.
#pragma once

#include <cstdint>
#include <type_traits>

#include "symmflow/core/tensor.hpp"
#include "symmflow/ops/value.hpp"

namespace symmflow::cpu {

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <typename T>
inline constexpr bool kIsFloat = kIsHalf<T> || std::is_floating_point_v<T>;
template <typename T>
inline constexpr bool kIsInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// Converts one element between any two symmflow element types (16-bit floats go through float,
// anything to bool is `!= 0`).
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (kIsHalf<From>) {
    return convert<To>(float(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (kIsHalf<To>) {
    return To(float(v));
  } else if constexpr (kIsInt<To> && std::is_floating_point_v<From>) {
    return static_cast<To>(int64_t(v));  // through int64 so narrow and unsigned types wrap
  } else {
    return static_cast<To>(v);
  }
}

// Converts a Scalar Value (bool, int or double) to T.
template <typename T>
inline T scalar_as(const Value& v) {
  if (v.is_bool()) return convert<T>(v.to_bool());
  if (v.is_int()) return convert<T>(v.to_int());
  return convert<T>(v.to_double());
}

// dst[...] = src[...] converted to dst's dtype; src broadcasts to dst's shape. Same-dtype
// contiguous copies are one memcpy. dst and src must not partially overlap (see copy_from()).
void copy_into(const Tensor& dst, const Tensor& src);
// copy_into() that first snapshots src when it shares memory with dst.
void copy_from(const Tensor& dst, const Tensor& src);
// `t` itself when it already has `dtype` (and is contiguous, when `contiguous`), else a fresh
// contiguous converted copy.
Tensor as_dtype(const Tensor& t, DType dtype, bool contiguous = false);
// A contiguous tensor over this thread's scratch buffer number `slot` (0..3), reused across calls;
// valid until the next scratch_tensor of the same slot on this thread.
Tensor scratch_tensor(const Shape& shape, DType dtype, int slot);
// Fills every element of `dst` (any strides) with a Scalar Value.
void fill(const Tensor& dst, const Value& value);
// Do the byte ranges that `a` and `b` can touch intersect?
bool may_overlap(const Tensor& a, const Tensor& b);

// A destination to compute into: `out` itself when it has `dtype` and (when `need_contiguous`)
// is contiguous, else a fresh contiguous temporary that finish() copies into `out`.
class Destination {
 public:
  Destination(const Tensor& out, DType dtype, bool need_contiguous);
  const Tensor& tensor() const { return tensor_; }
  void finish() const;

 private:
  Tensor out_;
  Tensor tensor_;
};

}  // namespace symmflow::cpu
