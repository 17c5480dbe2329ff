// The pipeline: passes by name, and compile() from a graph to a Plan.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "symmflow/ir/graph.hpp"
#include "symmflow/passes/plan.hpp"

namespace symmflow::passes {

struct PassInfo {
  std::string name;  // "functionalize"
  std::function<void(ir::Graph&)> run;
  std::string doc;  // one line
  bool optional = false;  // a fusion: the plan is correct without it (Note [skipping fusions])
};

// Graph-to-graph passes in pipeline order (plan_memory and emit_plan produce the Plan).
const std::vector<PassInfo>& graph_passes();
// Runs one pass by name (verify, functionalize, ..., reinplace); throws InvalidUsage listing the
// names when unknown.
void run_pass(const std::string& name, ir::Graph& graph);

struct CompileOptions {
  // Run the verifier after every pass as well as on the input. Unset: on in debug and sanitizer
  // builds of the library, off in release builds (DESIGN: "The verifier runs between passes in
  // debug builds"), where it would cost more than all the passes together.
  std::optional<bool> verify_each;
  // Called after each pass (graph passes, then "plan_memory"), e.g. for --print-after.
  std::function<void(const std::string& pass, const ir::Graph& graph)> after_pass;
  // Refuse schedules whose peer accesses of symmetric memory may race (check_races.hpp).
  bool race_check = true;
  // The source the graph was parsed from, for the race checker's diagnostics.
  std::string filename = "<graph>";
  std::string source;
  // Optional passes not to run (Note [skipping fusions]), besides those SYMMFLOW_SKIP_PASSES
  // names (comma-separated); naming another pass raises InvalidUsage.
  std::vector<std::string> skip_passes;
};

// Runs every pass and plans memory. Takes the graph (the plan keeps it).
std::shared_ptr<const Plan> compile(std::unique_ptr<ir::Graph> graph,
                                    const CompileOptions& options = {});

}  // namespace symmflow::passes
