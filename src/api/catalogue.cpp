// The op catalogue, schema checks and tunables as data (symmflow/api/catalogue.hpp).
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "symmflow/api/catalogue.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/exec/step_profile.hpp"
#include "symmflow/ops/registry.hpp"
#include "symmflow/runtime/tunables.hpp"
#include "symmflow/schema/schema.hpp"

namespace symmflow::api {

namespace {

std::vector<std::string> names_of(const FunctionSchema& s, const std::vector<int>& idx) {
  std::vector<std::string> out;
  for (int i : idx) out.push_back(s.args[size_t(i)].name);
  return out;
}

OpInfo info_of(const OpDef& op) {
  OpInfo info;
  info.name = op.name();
  info.schema = op.schema().str();
  for (Backend b : op.backends()) info.backends.push_back(backend_name(b));
  info.symm_args = op.symm_args();
  info.group_arg = op.group_arg();
  info.functional = op.functional_variant();
  info.inplace = op.inplace_variant();
  info.out = op.out_variant();
  info.tags = op.tags().str();
  if (const OpExchange* e = op.exchange()) info.exchange = e->algorithm + ": " + e->why;
  return info;
}

}  // namespace

std::vector<OpInfo> list_ops(const std::string& ns) {
  const Registry& reg = Registry::global();
  std::vector<const OpDef*> ops = reg.ops(ns);
  SF_CHECK(!ops.empty() || ns.empty(), "no ops in namespace '{}' (namespaces: {})", ns,
           fmt::join(reg.namespaces(), ", "));
  std::vector<OpInfo> out;
  for (const OpDef* op : ops) out.push_back(info_of(*op));
  return out;
}

std::vector<std::string> op_namespaces() { return Registry::global().namespaces(); }

SchemaReport check_schema(const std::string& text) {
  FunctionSchema s = parse_schema(text);
  if (auto problem = validate_schema(s)) invalid_usage("{}", *problem);
  AliasAnalysis a = analyze_aliases(s);
  SchemaReport r;
  r.schema = s.str();
  r.is_mutable = a.is_mutable();
  r.written = names_of(s, a.written_args);
  r.out_args = names_of(s, a.out_args);
  for (size_t i = 0; i < s.returns.size(); ++i) {
    int src = a.returns_alias[i];
    std::string what = src < 0 ? "fresh" : fmt::format("aliases {}", s.args[size_t(src)].name);
    // Note [list returns]: each result of a list return is fresh, or aliases the list's argument.
    r.returns.push_back(a.list_return ? "list, each " + what : what);
  }
  r.is_view = a.is_view();
  return r;
}

std::vector<Tunable> tunables() {
  std::vector<Tunable> out;
  for (const TunableInfo& t : tunable_table()) {  // throws naming a bad variable
    out.push_back({t.name, t.env, t.value, t.default_value, t.doc,
                   std::getenv(t.env.c_str()) != nullptr});
  }
  return out;
}

void set_deterministic(bool on) {
  Tunables t = symmflow::tunables();
  t.deterministic = on;
  set_tunables(t);
}

std::vector<StepTotal> step_profile() {
  std::vector<StepTotal> out;
  for (const exec::StepTime& t : exec::step_profile()) {
    out.push_back({t.label, t.total_us / 1e3, t.calls});
  }
  return out;
}

void set_step_profile(bool on) {
  Tunables t = symmflow::tunables();
  t.step_profile = on;
  set_tunables(t);
}

void reset_step_profile() { exec::reset_step_profile(); }

}  // namespace symmflow::api
