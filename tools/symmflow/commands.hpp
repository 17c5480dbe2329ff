// Sub-commands of the `symmflow` tool. Each adds its CLI11 sub-command to `app` and returns it
// with the function that runs it after parsing (returning the exit code).
#pragma once

#include <functional>
#include <utility>

#include <CLI/CLI.hpp>

namespace symmflow::tool {

using Command = std::pair<CLI::App*, std::function<int()>>;

Command add_ops_command(CLI::App& app);
Command add_demo_command(CLI::App& app);
Command add_opt_command(CLI::App& app);
Command add_env_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_compile_command(CLI::App& app);
Command add_explain_command(CLI::App& app);
Command add_run_command(CLI::App& app);

}  // namespace symmflow::tool
