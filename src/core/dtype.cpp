#include "symmflow/core/dtype.hpp"

#include <array>
#include <utility>

namespace symmflow {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::f64: return 8;
    case DType::i8: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u32: return 4;
    case DType::boolean: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f64: return "f64";
    case DType::i8: return "i8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u32: return "u32";
    case DType::boolean: return "bool";
  }
  return "?";
}

std::string_view dtype_torch_name(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f16: return "half";
    case DType::bf16: return "bfloat16";
    case DType::f64: return "double";
    case DType::i8: return "char";
    case DType::i32: return "int";
    case DType::i64: return "long";
    case DType::u32: return "uint32";
    case DType::boolean: return "bool";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  static const std::array<std::pair<std::string_view, DType>, 12> kAliases = {{
      {"float32", DType::f32},  {"float16", DType::f16}, {"float64", DType::f64},
      {"int8", DType::i8},      {"int32", DType::i32},   {"int64", DType::i64},
      {"float", DType::f32},    {"half", DType::f16},    {"double", DType::f64},
      {"long", DType::i64},     {"char", DType::i8},     {"uint32", DType::u32},
  }};
  for (DType t : kAllDTypes) {
    if (name == dtype_name(t) || name == dtype_torch_name(t)) return t;
  }
  for (auto& [alias, t] : kAliases) {
    if (name == alias) return t;
  }
  return std::nullopt;
}

bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64;
}

bool is_integral(DType t) {
  return t == DType::i8 || t == DType::i32 || t == DType::i64 || t == DType::u32;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::boolean) return b;
  if (b == DType::boolean) return a;
  if (is_floating(a) != is_floating(b)) return is_floating(a) ? a : b;
  if (is_floating(a)) {
    if (a == DType::f64 || b == DType::f64) return DType::f64;
    return DType::f32;  // f32 with a 16-bit type, or f16 with bf16
  }
  // Two different integer types: the wider signed one wins; u32 with i32 widens to i64.
  auto rank = [](DType t) {
    switch (t) {
      case DType::i8: return 0;
      case DType::i32: return 1;
      case DType::u32: return 2;
      default: return 3;
    }
  };
  DType hi = rank(a) > rank(b) ? a : b;
  return hi == DType::u32 ? DType::i64 : hi;
}

}  // namespace symmflow
