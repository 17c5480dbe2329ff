// validate_schema: the structural rules an op schema must satisfy before the registry defines it.
// Checked in this order, the first violation is returned as a message naming the op (its
// qualified name) and the argument or return at fault, saying why:
//   1. argument names are distinct (and so are return names, where given);
//   2. alias annotations sit only on Tensor types (`Tensor(a)`, `Tensor(a!)[]`, `Tensor(a)?`);
//   3. every alias set a return names (other than the wildcard `*`) is the set of some argument;
//   4. a mutating op never returns an alias of an argument it mutates (DESIGN.md: it returns `()`
//      or fresh tensors, so functionalization can always rewrite it);
//   5. a list return (`Tensor[]`, `Tensor(a)[]`) is a Tensor list, the op's only return, on an op
//      that writes no argument (Note [list returns] in schema.hpp).
// Returns nullopt when the schema is valid.
#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include <fmt/format.h>

#include "symmflow/schema/schema.hpp"

namespace symmflow {
namespace {

bool arg_has_set(const Argument& arg, const std::string& set) {
  if (!arg.alias) return false;
  const auto& a = *arg.alias;
  return std::find(a.before_sets.begin(), a.before_sets.end(), set) != a.before_sets.end() ||
         std::find(a.after_sets.begin(), a.after_sets.end(), set) != a.after_sets.end();
}

}  // namespace

std::optional<std::string> validate_schema(const FunctionSchema& schema) {
  const std::string op = schema.qualified_name();

  std::set<std::string> names;
  for (const Argument& arg : schema.args) {
    if (!names.insert(arg.name).second) {
      return fmt::format("op '{}': duplicate argument name '{}'", op, arg.name);
    }
  }
  std::set<std::string> return_names;
  for (const Return& r : schema.returns) {
    if (!r.name.empty() && !return_names.insert(r.name).second) {
      return fmt::format("op '{}': duplicate return name '{}'", op, r.name);
    }
  }

  for (const Argument& arg : schema.args) {
    if (arg.alias && !arg.type.is_tensor_like()) {
      return fmt::format(
          "op '{}': argument '{}' of type '{}' has alias annotation {}; only Tensor types may "
          "carry alias annotations",
          op, arg.name, arg.type.str(), arg.alias->str());
    }
  }
  for (size_t r = 0; r < schema.returns.size(); ++r) {
    const Return& ret = schema.returns[r];
    if (ret.alias && !ret.type.is_tensor_like()) {
      return fmt::format(
          "op '{}': return {} of type '{}' has alias annotation {}; only Tensor types may carry "
          "alias annotations",
          op, r, ret.type.str(), ret.alias->str());
    }
  }

  for (size_t r = 0; r < schema.returns.size(); ++r) {
    const Return& ret = schema.returns[r];
    if (!ret.alias) continue;
    for (const std::string& set : ret.alias->before_sets) {
      if (set == "*") continue;
      bool found = std::any_of(schema.args.begin(), schema.args.end(),
                               [&](const Argument& a) { return arg_has_set(a, set); });
      if (!found) {
        return fmt::format(
            "op '{}': return {} has alias annotation {} but no argument has alias set '{}'", op, r,
            ret.alias->str(), set);
      }
    }
  }

  AliasAnalysis aliases = analyze_aliases(schema);
  for (size_t r = 0; r < aliases.returns_alias.size(); ++r) {
    // returns_alias names the first argument sharing a set; check every argument sharing one.
    const Return& ret = schema.returns[r];
    if (!ret.alias) continue;
    for (const Argument& arg : schema.args) {
      if (!arg.is_written()) continue;
      for (const std::string& set : ret.alias->before_sets) {
        if (set != "*" && arg_has_set(arg, set)) {
          return fmt::format(
              "op '{}': argument '{}' is mutated {} and also returned as an alias; a mutating op "
              "must return () or fresh tensors",
              op, arg.name, arg.alias->str());
        }
      }
    }
  }
  for (size_t r = 0; r < schema.returns.size(); ++r) {
    const Return& ret = schema.returns[r];
    if (!ret.type.is_list) continue;
    if (ret.type.kind != TypeKind::Tensor || ret.type.elem_optional || ret.type.list_size ||
        ret.type.list_optional) {
      return fmt::format("op '{}': return {} has type '{}'; a list return must be 'Tensor[]'", op,
                         r, ret.type.str());
    }
    if (schema.returns.size() != 1) {
      return fmt::format("op '{}': return {} is a list ('{}') beside other returns; a list return "
                         "must be the op's only return",
                         op, r, ret.type.str());
    }
    if (!aliases.written_args.empty()) {
      return fmt::format("op '{}': returns a list ('{}') and writes argument '{}'; a list return is "
                         "only allowed on an op that writes no argument",
                         op, ret.type.str(), schema.args[size_t(aliases.written_args[0])].name);
    }
  }
  return std::nullopt;
}

}  // namespace symmflow
