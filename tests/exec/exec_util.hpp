// Helpers of the exec tests: plans from hand-placed graphs and deterministic inputs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "symmflow/core/tensor.hpp"
#include "symmflow/ir/graph.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/passes/plan_memory.hpp"

namespace symmflow::testing {

// A graph whose layouts (and attrs) are written by hand, planned by plan_memory + emit_plan.
std::shared_ptr<const passes::Plan> plan_text(const std::string& text, int world_size = 1);
std::unique_ptr<ir::Graph> parse(const std::string& text, int world_size = 1);

// Deterministic values, small multiples of 1/4 (exact in f32), different per rank and seed.
Tensor make_input(const Shape& shape, DType dtype, int rank, int seed);

// Every element of a equals b's (same dtype and shape).
void expect_same(const Tensor& a, const Tensor& b, const std::string& what);

// The tp_mlp of `layers` layers (x: f32[16, 64], weights f32[64, 64]); `placed` adds the layouts
// and out_variant attributes the passes would give it.
std::string tp_mlp_text(int layers, bool placed);

}  // namespace symmflow::testing
