// A fused pointwise region on the GPU (fused.cpp): the same contract as exec::run_fused (flat
// contiguous inputs and outputs on this GPU, one per body input and output; an input may also be
// strided, or have a smaller shape that broadcasts to the region's), run as one pointwise program
// on cuda::current_stream(). Private to the cuda backend.
#pragma once

#include <span>

#include "symmflow/core/tensor.hpp"
#include "symmflow/ir/graph.hpp"

namespace symmflow::cuda {

void run_fused(const ir::Graph& body, std::span<const Tensor> inputs,
               std::span<const Tensor> outputs);

}  // namespace symmflow::cuda
