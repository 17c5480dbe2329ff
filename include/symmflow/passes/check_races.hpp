// check_races: the race checker for peer-written and peer-read symmetric memory (issue 16,
// item 1; the model in docs/races.md and in src/passes/check_races.cpp).
#pragma once

#include <string>
#include <vector>

#include "symmflow/ir/graph.hpp"

namespace symmflow::passes {

// Every race found on the final (scheduled, reinplaced) graph, as diagnostics pointing at the
// source line of one access and naming the other's; empty when the schedule provably orders
// every peer access.
std::vector<ir::Diagnostic> find_races(const ir::Graph& graph);
// Throws ir::DiagnosticError with find_races' diagnostics (formatted against `source`) when there
// are any.
void check_races(const ir::Graph& graph, const std::string& filename = "<graph>",
                 const std::string& source = "");

}  // namespace symmflow::passes
