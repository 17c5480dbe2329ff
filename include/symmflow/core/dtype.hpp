// Element types. Names follow the text format (`f32`, `bf16`, ...); PyTorch's ScalarType names
// (`float`, `bfloat16`, `long`, ...) are accepted where schemas use them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "symmflow/core/half.hpp"

namespace symmflow {

enum class DType : uint8_t { f32, f16, bf16, f64, i8, i32, i64, u32, boolean };

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f16, DType::bf16,
                                       DType::f64, DType::i8,  DType::i32,
                                       DType::i64, DType::u32, DType::boolean};

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);        // "f32", "bf16", "bool", ...
std::string_view dtype_torch_name(DType t);  // "float", "bfloat16", "bool", ...
// Accepts both our names and PyTorch's ScalarType names; nullopt when unknown.
std::optional<DType> parse_dtype(std::string_view name);

bool is_floating(DType t);
bool is_integral(DType t);  // integers, not bool
// PyTorch's type promotion for two tensor operands (f16 with bf16 gives f32).
DType promote_types(DType a, DType b);

// Compile-time mapping between C++ types and DType.
template <typename T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::f16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::bf16; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::f64; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::i8; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::i32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::i64; };
template <> struct DTypeOf<uint32_t> { static constexpr DType value = DType::u32; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::boolean; };
template <typename T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// Calls f with a value of the C++ type for `t` (as `decltype(tag)::type`).
template <typename T>
struct TypeTag {
  using type = T;
};
template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(TypeTag<float>{});
    case DType::f16: return f(TypeTag<Half>{});
    case DType::bf16: return f(TypeTag<BFloat16>{});
    case DType::f64: return f(TypeTag<double>{});
    case DType::i8: return f(TypeTag<int8_t>{});
    case DType::i32: return f(TypeTag<int32_t>{});
    case DType::i64: return f(TypeTag<int64_t>{});
    case DType::u32: return f(TypeTag<uint32_t>{});
    case DType::boolean: return f(TypeTag<bool>{});
  }
  return f(TypeTag<float>{});
}

// Accumulation type: float for 16-bit floats, the type itself otherwise.
template <typename T> struct AccType { using type = T; };
template <> struct AccType<Half> { using type = float; };
template <> struct AccType<BFloat16> { using type = float; };
template <typename T>
using acc_t = typename AccType<T>::type;

}  // namespace symmflow
