// Helpers shared by the executor and the interpreter (internal).
#pragma once

#include <string_view>
#include <vector>

#include "symmflow/core/tensor.hpp"
#include "symmflow/ir/graph.hpp"

namespace symmflow::exec::detail {

// Checks inputs against the graph's inputs: count, defined, dtype and shape. `who` prefixes the
// messages ("run", "interpret").
void check_inputs(const ir::Graph& graph, const std::vector<Tensor>& inputs, std::string_view who);
// Checks that the graph was built for the calling runtime's world size.
void check_world(const ir::Graph& graph, int world_size, std::string_view who);
// dst <- src (same dtype and shape) through aten::copy_.
void copy_tensor(const Tensor& dst, const Tensor& src);
// A fresh contiguous copy.
Tensor clone_tensor(const Tensor& src);
// Whether a and b are the same memory with the same dtype, shape and strides.
bool same_memory(const Tensor& a, const Tensor& b);

}  // namespace symmflow::exec::detail
