// Test support: graphs and plans from text, for tests of the compiler and exec.
//
// Guarantees: parse reads the text format for a world of `world_size` ranks (throws
//   DiagnosticError as ir::parse_graph does); plan_text plans such a graph as written (layouts and
//   attrs by hand: plan_memory + emit_plan, no other pass); tp_mlp_text writes the tensor-parallel
//   MLP of `layers` layers (x: f32[16, 64], weights f32[64, 64], a one-shot all-reduce on `tp`
//   after each matmul), `placed` adding the layouts and out_variant attributes the passes give it.
#pragma once

#include <memory>
#include <string>

#include "symmflow/ir/graph.hpp"
#include "symmflow/passes/plan.hpp"

namespace symmflow::testing {

std::unique_ptr<ir::Graph> parse(const std::string& text, int world_size = 1);

std::shared_ptr<const passes::Plan> plan_text(const std::string& text, int world_size = 1);

std::string tp_mlp_text(int layers, bool placed);

}  // namespace symmflow::testing
