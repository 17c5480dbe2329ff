// `symmflow opt --pass NAME [--pass NAME...] file.sf`: parses a graph, runs the named passes in
// order (verifying after each) and prints the resulting IR. What the golden tests call.
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "graph_file.hpp"
#include "symmflow/ir/verify.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/passes/pipeline.hpp"

namespace symmflow::tool {

namespace {
struct OptOptions {
  std::string file;
  std::vector<std::string> passes;
  std::vector<std::string> plugins;
  int ranks = 4;
};

int run_opt(const OptOptions& o) {
  for (const std::string& p : o.plugins) load_plugin(p);
  std::string source = read_file(o.file);
  std::unique_ptr<ir::Graph> g = ir::parse_graph(source, {o.file, o.ranks});
  ir::verify_or_throw(*g, o.file, source);
  for (const std::string& p : o.passes) {
    passes::run_pass(p, *g);
    ir::verify_or_throw(*g, o.file + " (after " + p + ")", "");
  }
  fmt::print("{}", ir::print_graph(*g));
  return 0;
}
}  // namespace

Command add_opt_command(CLI::App& app) {
  auto o = std::make_shared<OptOptions>();
  CLI::App* sub = app.add_subcommand("opt", "Run passes on a graph file and print the IR");
  sub->add_option("file", o->file, "Graph file (.sf)")->required();
  sub->add_option("--pass,-p", o->passes, "Pass to run, in order (repeatable)");
  sub->add_option("--plugin", o->plugins, "Load a plugin shared library first (repeatable)");
  sub->add_option("--ranks", o->ranks, "World size that sizes the groups (default 4)");
  return {sub, [o] { return run_opt(*o); }};
}

}  // namespace symmflow::tool
