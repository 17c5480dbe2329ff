// `symmflow compile file.sf [--ranks N] [--emit ir|plan] [--print-after PASS] [--verify-each]
// [--plugin P] [--no-race-check]`:
// runs the whole pipeline (api::compile) and prints the plan (the default) or the optimised
// graph. --print-after PASS (repeatable, or "all") prints the IR after that pass, as
// "// after PASS" and the graph, before the final output. Unknown pass names are refused with the
// list of names.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "symmflow/symmflow.hpp"

namespace symmflow::tool {

namespace {
struct CompileCmdOptions {
  std::string file;
  std::string emit = "plan";
  std::vector<std::string> print_after;
  std::vector<std::string> plugins;
  int ranks = 4;
  bool verify_each = false;
  bool race_check = true;  // --no-race-check turns it off
};

int run_compile(const CompileCmdOptions& o) {
  std::vector<std::string> names = api::pass_names();
  for (const std::string& p : o.print_after) {
    SF_CHECK(p == "all" || std::find(names.begin(), names.end(), p) != names.end(),
             "--print-after: unknown pass '{}' (known: {}, all)", p, fmt::join(names, ", "));
  }
  api::load_plugins(o.plugins);
  api::CompileOptions options;
  if (o.verify_each) options.verify_each = true;
  options.race_check = o.race_check;
  options.print_after = o.print_after;
  api::CompiledProgram compiled = api::compile(api::Program::parse_file(o.file, o.ranks), options);
  for (const auto& [pass, ir] : compiled.printed_after()) fmt::print("// after {}\n{}\n", pass, ir);
  fmt::print("{}", o.emit == "ir" ? compiled.ir_text() : compiled.plan_text());
  return 0;
}
}  // namespace

Command add_compile_command(CLI::App& app) {
  auto o = std::make_shared<CompileCmdOptions>();
  CLI::App* sub = app.add_subcommand("compile", "Compile a graph file and print its plan or IR");
  sub->add_option("file", o->file, "Graph file (.sf)")->required();
  sub->add_option("--ranks", o->ranks, "World size that sizes the groups (default 4)");
  sub->add_option("--emit", o->emit, "What to print: plan (default) or ir")
      ->check(CLI::IsMember({"ir", "plan"}));
  sub->add_option("--print-after", o->print_after,
                  "Print the IR after this pass (repeatable; all)");
  sub->add_flag("--verify-each", o->verify_each,
                "Run the verifier after every pass (the default in debug builds only)");
  sub->add_option("--plugin", o->plugins, "Load a plugin shared library first (repeatable)");
  sub->add_flag("--no-race-check{false}", o->race_check,
                "Do not refuse programs whose peer accesses may race (docs/races.md)");
  return {sub, [o] { return run_compile(*o); }};
}

}  // namespace symmflow::tool
