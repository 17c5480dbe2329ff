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

// A sequence-parallel block at `w` ranks (group `tp`) as DTensor's graphs have it: the sequence
// dim (1) of x: [2, 3, 17] gathered (all-gather of dim 0, equal split, cat along 1), two
// column-parallel mms of the gathered rows (q, k), their product through a row-parallel mm
// reduce-scattered back along the sequence dim; returns (r, flat: the gathered rows). `dtype`:
// "f32", "bf16".
std::string sequence_parallel_text(int w, const std::string& dtype);

}  // namespace symmflow::testing
