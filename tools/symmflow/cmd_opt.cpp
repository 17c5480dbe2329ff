// `symmflow opt --pass NAME [--pass NAME...] file.sf`: parses a graph, runs the named passes in
// order (verifying after each) and prints the resulting IR. What the golden tests call.
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "symmflow/symmflow.hpp"

namespace symmflow::tool {

namespace {
struct OptOptions {
  std::string file;
  std::vector<std::string> passes;
  std::vector<std::string> plugins;
  int ranks = 4;
};

int run_opt(const OptOptions& o) {
  api::load_plugins(o.plugins);
  fmt::print("{}", api::Program::parse_file(o.file, o.ranks).print_after_passes(o.passes));
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
