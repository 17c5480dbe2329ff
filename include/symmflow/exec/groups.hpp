// The groups a graph declares, made on the calling rank's runtime.
#pragma once

#include "symmflow/ir/graph.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow::exec {

// Creates every group the graph declares that `rt` does not have yet, in declaration order
// (collective: every rank calls with the same graph). `group tp` spans the world; `group tp(2)`
// splits it into consecutive blocks of 2 ranks; `group dp = {0, 2}, {1, 3}` makes the listed
// subgroup that holds this rank (none when the rank is in none). Throws InvalidUsage when a block size does not
// divide the world, or an existing group's size differs from the graph's.
void ensure_groups(const ir::Graph& graph, Runtime& rt);

}  // namespace symmflow::exec
