// `symmflow ops`: lists the registered ops (schema, symm args, group argument, variants, backends,
// tags: Note [op tags] in ops/registry.hpp; a `tags:` line when the op has any)
// or, with --check, parses and validates one schema and prints its alias analysis.
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::tool {

namespace {

struct OpsOptions {
  std::string ns;
  std::vector<std::string> plugins;
  std::string check;
};

std::string names_of(const FunctionSchema& s, const std::vector<int>& idx) {
  std::vector<std::string> out;
  for (int i : idx) out.push_back(s.args[size_t(i)].name);
  return out.empty() ? "-" : fmt::format("{}", fmt::join(out, ", "));
}

int run_check(const std::string& text) {
  FunctionSchema s = parse_schema(text);
  if (auto problem = validate_schema(s)) invalid_usage("{}", *problem);
  AliasAnalysis a = analyze_aliases(s);
  std::vector<std::string> ret;
  for (size_t r = 0; r < s.returns.size(); ++r) {
    int src = a.returns_alias[r];
    ret.push_back(src < 0 ? "fresh" : fmt::format("aliases {}", s.args[size_t(src)].name));
  }
  fmt::print("schema:   {}\n", s.str());
  fmt::print("mutable:  {} (writes: {})\n", a.is_mutable() ? "yes" : "no",
             names_of(s, a.written_args));
  fmt::print("out args: {}\n", names_of(s, a.out_args));
  fmt::print("returns:  {}\n", ret.empty() ? "()" : fmt::format("{}", fmt::join(ret, ", ")));
  fmt::print("view:     {}\n", a.is_view() ? "yes" : "no");
  fmt::print("ok: schema is valid\n");
  return 0;
}

std::string backends_of(const OpDef& op) {
  std::vector<std::string> out;
  for (Backend b : op.backends()) out.push_back(backend_name(b));
  return out.empty() ? "none" : fmt::format("{}", fmt::join(out, ","));
}

int run_list(const OpsOptions& o) {
  for (const std::string& p : o.plugins) load_plugin(p);
  const Registry& reg = Registry::global();
  std::vector<const OpDef*> ops = reg.ops(o.ns);
  SF_CHECK(!ops.empty() || o.ns.empty(), "no ops in namespace '{}' (namespaces: {})", o.ns,
           fmt::join(reg.namespaces(), ", "));
  for (const OpDef* op : ops) {
    fmt::print("{}\n", op->schema().str());
    std::string line = fmt::format("    backends: {}", backends_of(*op));
    if (!op->symm_args().empty())
      line += fmt::format("  symm: {}  group: {}", fmt::join(op->symm_args(), ", "),
                          op->group_arg());
    if (!op->functional_variant().empty()) line += "  functional: " + op->functional_variant();
    if (!op->inplace_variant().empty()) line += "  inplace: " + op->inplace_variant();
    if (!op->out_variant().empty()) line += "  out: " + op->out_variant();
    fmt::print("{}\n", line);
    if (!op->tags().empty()) fmt::print("    tags: {}\n", op->tags().str());
  }
  fmt::print("{} ops\n", ops.size());
  return 0;
}

}  // namespace

Command add_ops_command(CLI::App& app) {
  auto opts = std::make_shared<OpsOptions>();
  CLI::App* sub = app.add_subcommand("ops", "List registered ops or check one schema");
  sub->add_option("--namespace,-n", opts->ns, "Only ops of this namespace (aten, symm_mem, ...)");
  sub->add_option("--plugin,-p", opts->plugins, "Load a plugin shared library first (repeatable)");
  sub->add_option("--check", opts->check,
                  "Parse and validate one schema, print its alias analysis");
  return {sub, [opts] { return opts->check.empty() ? run_list(*opts) : run_check(opts->check); }};
}

}  // namespace symmflow::tool
