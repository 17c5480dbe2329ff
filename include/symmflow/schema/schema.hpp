// Op schemas in PyTorch's schema language:
//   ns::name.overload(Type name=default, *, Type kwarg) -> returns
// `parse_schema` and `FunctionSchema::str` round-trip: printing a parsed schema gives the text
// back (whitespace normalised to PyTorch's style: ", " between args, " -> " before returns).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace symmflow {

enum class TypeKind {
  Tensor, Int, SymInt, Float, Bool, Str, Scalar, ScalarType, Device, Layout, MemoryFormat
};

// The schema spelling of a type kind ("Tensor", "int", "SymInt", ...) and back (nullopt when the
// name is not a type).
const char* type_kind_name(TypeKind kind);
std::optional<TypeKind> type_kind_from_name(std::string_view name);

// A type such as `Tensor`, `Tensor?`, `Tensor[]`, `Tensor?[]`, `int[2]`, `int[]?`.
struct Type {
  TypeKind kind = TypeKind::Tensor;
  bool elem_optional = false;          // the `?` before `[]` (or the only `?` of a non-list)
  bool is_list = false;
  std::optional<int64_t> list_size;    // `int[2]`
  bool list_optional = false;          // the `?` after `[]`

  bool is_tensor_like() const { return kind == TypeKind::Tensor; }  // Tensor, Tensor?, Tensor[]
  bool is_optional() const { return is_list ? list_optional : elem_optional; }
  std::string str() const;
  bool operator==(const Type&) const = default;
};

// `(a)`, `(a!)`, `(a -> *)`, `(a|b)`, `(a! -> a|b)`.
struct AliasInfo {
  std::vector<std::string> before_sets;  // {"a"}
  bool is_write = false;                 // `!`
  std::vector<std::string> after_sets;   // after `->`; "*" is the wildcard set
  std::string str() const;               // "(a!)"
  bool operator==(const AliasInfo&) const = default;
};

// A default value as written, plus its parsed form.
struct DefaultValue {
  enum class Kind { None, Int, Float, Bool, Str, IntList, FloatList, Enum };
  Kind kind = Kind::None;
  std::string text;  // exactly as printed: "None", "1", "1e-05", "'sum'", "[]", "contiguous_format"
  int64_t int_value = 0;
  double float_value = 0;
  bool bool_value = false;
  std::string str_value;  // Str: unquoted text; Enum: the identifier
  std::vector<int64_t> int_list;
  std::vector<double> float_list;
  bool operator==(const DefaultValue& o) const { return text == o.text; }
};

struct Argument {
  Type type;
  std::string name;
  std::optional<AliasInfo> alias;
  std::optional<DefaultValue> default_value;
  bool kwarg_only = false;
  bool is_written() const { return alias && alias->is_write; }
  std::string str() const;  // "Tensor(a!) out", "int dim=0"
  bool operator==(const Argument&) const = default;
};

struct Return {
  Type type;
  std::string name;  // may be empty
  std::optional<AliasInfo> alias;
  std::string str() const;
  bool operator==(const Return&) const = default;
};

struct FunctionSchema {
  std::string ns;        // "aten"; empty when the text had no namespace
  std::string name;      // "add"
  std::string overload;  // "Tensor"; may be empty
  std::vector<Argument> args;
  std::vector<Return> returns;

  std::string qualified_name() const;  // "aten::add.Tensor" (no overload: "aten::add")
  std::string str() const;             // the whole schema text
  int arg_index(std::string_view arg_name) const;  // -1 when absent
  bool operator==(const FunctionSchema&) const = default;
};

// Parses one schema. Throws SchemaParseError (column and what was expected) on malformed text,
// including a default whose literal does not fit the argument's type.
FunctionSchema parse_schema(std::string_view text);

// What an op reads, writes and returns, derived from alias annotations.
struct AliasAnalysis {
  std::vector<int> written_args;         // args annotated with `!`
  std::vector<int> out_args;             // the out args of an out variant (see schema/alias.cpp)
  // returns_alias[r] = index of the argument return r aliases (shares an alias set with), or -1.
  // Indexed by schema return; ask output_alias for a call's result (Note [list returns]).
  std::vector<int> returns_alias;
  // Note [list returns]: the op's one return is a list (`Tensor[]`, `Tensor(a)[]`, as
  // split_with_sizes has). A call then has as many results as its shape function gives for the
  // arguments (zero or more), each a separate Value of the call, and every one of them aliases
  // what the list return aliases. validate_schema allows a list return only as the op's only
  // return and only on an op that writes no argument (so a functional node's new values always
  // follow a fixed number of returns).
  bool list_return = false;
  // The argument that result `output` of a call aliases, or -1 (fresh, or past the returns: the
  // new values of a functional node). Every result of a list return aliases what the list does.
  int output_alias(size_t output) const {
    if (list_return) return returns_alias[0];
    return output < returns_alias.size() ? returns_alias[output] : -1;
  }
  // The number of results a call has when its shape function gave `shape_results` of them: that
  // number for a list return, the schema's return count otherwise.
  size_t output_count(size_t shape_results) const {
    return list_return ? shape_results : returns_alias.size();
  }
  bool is_mutable() const { return !written_args.empty(); }
  bool is_out_variant() const { return !out_args.empty(); }
  bool is_view() const;  // some return aliases a non-written argument
};
AliasAnalysis analyze_aliases(const FunctionSchema& schema);
// Whether the op is named as an out variant: its name ends with `_out`, or its overload is `out`
// or ends with `_out` (`add.out`, `sum.IntList_out`, `one_shot_all_reduce_out`).
bool is_out_variant_name(const FunctionSchema& schema);

// Structural rules every op schema must satisfy to be defined (distinct argument names, returns
// whose alias sets name an argument's set, no mutating op returning an alias of what it mutates).
// Returns the first violation as a message naming op and argument, or nullopt when valid.
std::optional<std::string> validate_schema(const FunctionSchema& schema);

}  // namespace symmflow
