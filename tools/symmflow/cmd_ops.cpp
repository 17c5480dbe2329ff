// `symmflow ops`: lists the registered ops (schema, symm args, group argument, variants, backends,
// tags: Note [op tags] in ops/registry.hpp; a `tags:` line when the op has any; an `exchange:`
// line when its definition declares how it moves data)
// or, with --check, parses and validates one schema and prints its alias analysis.
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "symmflow/symmflow.hpp"

namespace symmflow::tool {

namespace {

struct OpsOptions {
  std::string ns;
  std::vector<std::string> plugins;
  std::string check;
};

std::string joined(const std::vector<std::string>& names, const char* none) {
  return names.empty() ? none : fmt::format("{}", fmt::join(names, ", "));
}

int run_check(const std::string& text) {
  api::SchemaReport r = api::check_schema(text);
  fmt::print("schema:   {}\n", r.schema);
  fmt::print("mutable:  {} (writes: {})\n", r.is_mutable ? "yes" : "no", joined(r.written, "-"));
  fmt::print("out args: {}\n", joined(r.out_args, "-"));
  fmt::print("returns:  {}\n", joined(r.returns, "()"));
  fmt::print("view:     {}\n", r.is_view ? "yes" : "no");
  fmt::print("ok: schema is valid\n");
  return 0;
}

int run_list(const OpsOptions& o) {
  api::load_plugins(o.plugins);
  std::vector<api::OpInfo> ops = api::list_ops(o.ns);
  for (const api::OpInfo& op : ops) {
    fmt::print("{}\n", op.schema);
    std::string line = fmt::format("    backends: {}", op.backends.empty() ? "none"
                                   : fmt::format("{}", fmt::join(op.backends, ",")));
    if (!op.symm_args.empty())
      line += fmt::format("  symm: {}  group: {}", fmt::join(op.symm_args, ", "), op.group_arg);
    if (!op.functional.empty()) line += "  functional: " + op.functional;
    if (!op.inplace.empty()) line += "  inplace: " + op.inplace;
    if (!op.out.empty()) line += "  out: " + op.out;
    fmt::print("{}\n", line);
    if (!op.tags.empty()) fmt::print("    tags: {}\n", op.tags);
    if (!op.exchange.empty()) fmt::print("    exchange: {}\n", op.exchange);
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
