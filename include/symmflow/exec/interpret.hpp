// The eager reference interpreter: runs a graph op by op, without planning, as eager calls would.
//
//   std::vector<Tensor> expect = symmflow::exec::interpret(*graph, {x, w0, w1});
//
// Must run on a rank (inside run_threads or after init_mpi) when the graph communicates.
#pragma once

#include <vector>

#include "symmflow/core/tensor.hpp"
#include "symmflow/ir/graph.hpp"

namespace symmflow::exec {

// Runs `graph` on `inputs` (one per graph input; shapes and dtypes checked) and returns its
// outputs. Each node dispatches through the registry with fresh outputs: mutating ops mutate their
// argument tensors (graph inputs included, as in eager code); functional<op> nodes run the op on
// copies of the written arguments; copy nodes copy; fused bodies are interpreted recursively;
// writebacks copy the final values into the input tensors at the end. A value that some node
// uses as a symm argument of group g is produced straight in a fresh empty_symmetric tensor of g
// (so a buffer peers write is the tensor later nodes read); a symm argument that is still not
// symmetric in the node's group (a graph input, a view) is copied into a fresh empty_symmetric
// tensor before the call (and copied back after, when the op writes it): every rank makes these
// allocations in the same order. Rank-relative arguments (`rank+1`) are resolved per call. The graph's groups are created when the runtime lacks them.
std::vector<Tensor> interpret(const ir::Graph& graph, std::vector<Tensor> inputs);

}  // namespace symmflow::exec
