// plan_memory and emit_plan: the last two passes, from a scheduled graph to a Plan.
#pragma once

#include <memory>

#include "symmflow/passes/plan.hpp"

namespace symmflow::passes {

// Buffer assignment for a scheduled graph (see src/passes/plan_memory.cpp for the contract). It
// runs the planner's three layers: compute_live_ranges (live_ranges.hpp), pack_heap per colour
// (heap_packer.hpp, IR-free) and assign_buffers (buffer_assignment.hpp).
struct MemoryPlan {
  std::vector<PoolPlan> pools;
  std::vector<BufferPlan> buffers;
  std::unordered_map<const ir::Value*, int> buffer_of;
  std::vector<HeapEvent> events;
};
MemoryPlan plan_memory(const ir::Graph& graph);

// Packages the graph and its memory plan as steps, with the compiler-added copies listed.
std::shared_ptr<const Plan> emit_plan(std::shared_ptr<ir::Graph> graph, MemoryPlan memory);

}  // namespace symmflow::passes
