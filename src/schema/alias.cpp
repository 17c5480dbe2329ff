// analyze_aliases: what an op writes, returns as aliases, and which args are its `out` args,
// read off the alias annotations of its schema alone.
//
// Rules:
// - written_args: every argument whose annotation carries `!` (`Tensor(a!) self`), in order.
// - returns_alias[r]: the first argument sharing an alias set with return r (a set of the
//   return's annotation before `->` that appears in the argument's annotation, before or after
//   its `->`); the wildcard set `*` never links a return to an argument. -1 when none.
// - list_return: the only return is a list (Note [list returns] in schema.hpp); each result of a
//   call aliases what returns_alias[0] names.
// - is_view(): some return aliases an argument that the op does not write.
// - out_args: only for an *out variant*, an op whose name ends with `_out` or whose overload is
//   `out` or ends with `_out` (`add.out`, `sum.IntList_out`, `one_shot_all_reduce_out`): the
//   trailing contiguous run of written Tensor arguments at the end of the argument list. So
//   `two_shot_all_reduce_out(Tensor(a!) input, str reduce_op, str group_name, Tensor(b!) output)`
//   has out_args {3} while `input` is still among written_args. Any other op has none.
#include <algorithm>
#include <string>
#include <string_view>

#include "symmflow/schema/schema.hpp"

namespace symmflow {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool contains(const std::vector<std::string>& sets, const std::string& s) {
  return std::find(sets.begin(), sets.end(), s) != sets.end();
}

bool shares_set(const AliasInfo& ret, const AliasInfo& arg) {
  for (const std::string& s : ret.before_sets) {
    if (s == "*") continue;
    if (contains(arg.before_sets, s) || contains(arg.after_sets, s)) return true;
  }
  return false;
}

}  // namespace

bool is_out_variant_name(const FunctionSchema& schema) {
  return ends_with(schema.name, "_out") || schema.overload == "out" ||
         ends_with(schema.overload, "_out");
}

bool AliasAnalysis::is_view() const {
  for (int a : returns_alias) {
    if (a >= 0 && std::find(written_args.begin(), written_args.end(), a) == written_args.end()) {
      return true;
    }
  }
  return false;
}

AliasAnalysis analyze_aliases(const FunctionSchema& schema) {
  AliasAnalysis result;
  const int n = static_cast<int>(schema.args.size());
  for (int i = 0; i < n; ++i) {
    if (schema.args[i].is_written()) result.written_args.push_back(i);
  }
  for (const Return& r : schema.returns) {
    int aliased = -1;
    if (r.alias) {
      for (int i = 0; i < n && aliased < 0; ++i) {
        const auto& arg_alias = schema.args[i].alias;
        if (arg_alias && shares_set(*r.alias, *arg_alias)) aliased = i;
      }
    }
    result.returns_alias.push_back(aliased);
  }
  result.list_return = schema.returns.size() == 1 && schema.returns[0].type.is_list;
  if (is_out_variant_name(schema)) {
    int first = n;
    while (first > 0 && schema.args[first - 1].is_written() &&
           schema.args[first - 1].type.is_tensor_like()) {
      --first;
    }
    for (int i = first; i < n; ++i) result.out_args.push_back(i);
  }
  return result;
}

}  // namespace symmflow
