// Printing of schemas in PyTorch's canonical style: ", " between arguments, " -> " before the
// returns, `*` before the first keyword-only argument, alias annotations right after the base
// type name (`Tensor(a!)[]`), defaults exactly as DefaultValue::text holds them.
// Contract: for every schema s produced by parse_schema, parse_schema(s.str()) == s, and
// parse_schema(t).str() == t for every canonical text t. Returns print bare when there is exactly
// one unnamed return, `()` when there are none, parenthesised otherwise.
#include <array>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "symmflow/schema/schema.hpp"

namespace symmflow {
namespace {

constexpr std::array<std::pair<TypeKind, const char*>, 11> kTypeNames = {{
    {TypeKind::Tensor, "Tensor"},
    {TypeKind::Int, "int"},
    {TypeKind::SymInt, "SymInt"},
    {TypeKind::Float, "float"},
    {TypeKind::Bool, "bool"},
    {TypeKind::Str, "str"},
    {TypeKind::Scalar, "Scalar"},
    {TypeKind::ScalarType, "ScalarType"},
    {TypeKind::Device, "Device"},
    {TypeKind::Layout, "Layout"},
    {TypeKind::MemoryFormat, "MemoryFormat"},
}};

// `Tensor(a!)[]`: the alias annotation sits between the base name and the suffixes.
std::string type_with_alias(const Type& type, const std::optional<AliasInfo>& alias) {
  std::string out = type_kind_name(type.kind);
  if (alias) out += alias->str();
  if (type.elem_optional) out += '?';
  if (type.is_list) {
    out += type.list_size ? fmt::format("[{}]", *type.list_size) : std::string("[]");
    if (type.list_optional) out += '?';
  }
  return out;
}

}  // namespace

const char* type_kind_name(TypeKind kind) {
  for (const auto& [k, name] : kTypeNames) {
    if (k == kind) return name;
  }
  return "?";
}

std::optional<TypeKind> type_kind_from_name(std::string_view name) {
  for (const auto& [k, n] : kTypeNames) {
    if (name == n) return k;
  }
  return std::nullopt;
}

std::string Type::str() const {
  return type_with_alias(*this, std::nullopt);
}

std::string AliasInfo::str() const {
  std::string out = fmt::format("({}", fmt::join(before_sets, "|"));
  if (is_write) out += '!';
  if (!after_sets.empty()) out += fmt::format(" -> {}", fmt::join(after_sets, "|"));
  out += ')';
  return out;
}

std::string Argument::str() const {
  std::string out = type_with_alias(type, alias);
  out += ' ';
  out += name;
  if (default_value) {
    out += '=';
    out += default_value->text;
  }
  return out;
}

std::string Return::str() const {
  std::string out = type_with_alias(type, alias);
  if (!name.empty()) {
    out += ' ';
    out += name;
  }
  return out;
}

std::string FunctionSchema::qualified_name() const {
  std::string out = ns.empty() ? name : ns + "::" + name;
  if (!overload.empty()) out += "." + overload;
  return out;
}

std::string FunctionSchema::str() const {
  std::string out = qualified_name();
  out += '(';
  bool seen_kwarg = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) out += ", ";
    if (args[i].kwarg_only && !seen_kwarg) {
      out += "*, ";
      seen_kwarg = true;
    }
    out += args[i].str();
  }
  out += ") -> ";
  if (returns.size() == 1 && returns[0].name.empty()) {
    out += returns[0].str();
  } else {
    out += '(';
    for (size_t i = 0; i < returns.size(); ++i) {
      if (i > 0) out += ", ";
      out += returns[i].str();
    }
    out += ')';
  }
  return out;
}

int FunctionSchema::arg_index(std::string_view arg_name) const {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].name == arg_name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace symmflow
