// `symmflow explain file.sf [--ranks N] [--hosts 0,0,1,1] [--json] [--plugin P]`: compiles a graph and explains its
// memory, copies and collectives (api::format_explain has what the text shows). --json prints the
// explain data as JSON (api::to_json): {"program", "world_size", "steps": [{"name",
// "communicates"}], "pools": [{"name","peak_bytes","lower_bound_bytes","order"}], "buffers":
// [{"name","pool","pool_index","offset","bytes","dtype","shape","first_step","last_step",
// "intermediate"}], "copies": [{"step","kind","reason","bytes"}], "collectives": [{"step","op",
// "group","ranks","bytes","cpu","cuda","why"}]}.
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "symmflow/symmflow.hpp"

namespace symmflow::tool {

namespace {
struct ExplainOptions {
  std::string file;
  std::vector<std::string> plugins;
  int ranks = 4;
  std::vector<int> hosts;  // --hosts (Note [hosts])
  bool json = false;
};

int run_explain(const ExplainOptions& o) {
  api::load_plugins(o.plugins);
  api::CompileOptions c;
  c.hosts = o.hosts;
  api::CompiledProgram compiled = api::compile(api::Program::parse_file(o.file, o.ranks), c);
  if (o.json) {
    fmt::print("{}\n", compiled.explain_json());
  } else {
    fmt::print("{}", api::format_explain(compiled.explain(), o.file));
  }
  return 0;
}
}  // namespace

Command add_explain_command(CLI::App& app) {
  auto o = std::make_shared<ExplainOptions>();
  CLI::App* sub =
      app.add_subcommand("explain", "Explain a compiled graph's memory plan and copies");
  sub->add_option("file", o->file, "Graph file (.sf)")->required();
  sub->add_option("--ranks", o->ranks, "World size that sizes the groups (default 4)");
  sub->add_option("--hosts", o->hosts,
                  "The host of each rank (e.g. 0,0,1,1): collectives of groups that span hosts "
                  "say how they run there (docs/multihost.md)")
      ->delimiter(',');
  sub->add_flag("--json", o->json, "Print JSON");
  sub->add_option("--plugin", o->plugins, "Load a plugin shared library first (repeatable)");
  return {sub, [o] { return run_explain(*o); }};
}

}  // namespace symmflow::tool
