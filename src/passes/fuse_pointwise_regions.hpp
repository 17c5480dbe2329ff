// The regions of fuse_pointwise (fuse_pointwise.cpp has the pass's contract and its Notes):
// which fusible nodes run as one fused node, and which of their values leave it.
//
// find_regions(graph, nodes, fusible) walks `nodes` (the graph's, in order) back once: a
// producer joins the region of all its users (Note [regions with shared values]); users in
// several regions merge them when no path leads from one to another (Note [sibling regions]), or
// take a copy each (Note [recomputed producers]); every region within Note [fused region size].
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "symmflow/ir/graph.hpp"

namespace symmflow::passes::fusion {

struct Regions {
  // Per root (a region's last member): its members in program order, a recomputed node in each
  // region that took a copy of it; empty for any other node.
  std::vector<std::vector<size_t>> members;
  // Per root of a region of two or more: the values used outside it, or graph outputs or
  // writeback values, in program order, the root's last: the fused node's outputs. A recomputed
  // copy is never one.
  std::vector<std::vector<ir::Value*>> outputs;
  std::vector<size_t> root;        // per node: its region's root (itself when in none)
  std::vector<bool> recomputed;    // per node: copied into its users' regions, itself removed

  std::span<const size_t> of(size_t r) const { return members[r]; }
};

Regions find_regions(const ir::Graph& graph, const std::vector<ir::Node*>& nodes,
                     const std::vector<bool>& fusible);

}  // namespace symmflow::passes::fusion
