// Execution of a fused pointwise region (a `fused` node's body).
#pragma once

#include <span>

#include "symmflow/core/tensor.hpp"
#include "symmflow/ir/graph.hpp"

namespace symmflow::exec {

// Runs `body` (a chain of same-shape elementwise aten ops) on `inputs` (one per body input) and
// writes its results into `outputs` (one per body output, preallocated).
void run_fused(const ir::Graph& body, std::span<const Tensor> inputs, std::span<const Tensor> outputs);

}  // namespace symmflow::exec
