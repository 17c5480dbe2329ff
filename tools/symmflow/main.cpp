// `symmflow`: the command line, on the front door (symmflow/symmflow.hpp) alone. Errors print as "error: ..." with exit code 1; usage
// errors exit through CLI11 (code 106 and a usage line).
#include <iostream>
#include <vector>

#include "commands.hpp"
#include "symmflow/symmflow.hpp"

int main(int argc, char** argv) {
  CLI::App app{"symmflow: compile and run distributed tensor programs over symmetric memory"};
  app.set_version_flag("--version", std::string("symmflow ") + SYMMFLOW_VERSION);
  app.require_subcommand(1);
  std::vector<symmflow::tool::Command> commands = {
      symmflow::tool::add_ops_command(app),
      symmflow::tool::add_demo_command(app),
      symmflow::tool::add_opt_command(app),
      symmflow::tool::add_compile_command(app),
      symmflow::tool::add_explain_command(app),
      symmflow::tool::add_run_command(app),
      symmflow::tool::add_env_command(app),
      symmflow::tool::add_bench_command(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, run] : commands) {
      if (sub->parsed()) return run();
    }
  } catch (const symmflow::api::ProgramError& e) {
    std::cerr << e.what() << "\n";  // already "file:line:col: error: ..."
    return 1;
  } catch (const symmflow::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 1;
}
