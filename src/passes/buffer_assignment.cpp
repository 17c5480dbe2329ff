// Buffer assignment of the memory planner: each colour through the heap packer, the packing back
// onto the buffers. The contract is in include/symmflow/passes/buffer_assignment.hpp.
#include "symmflow/passes/buffer_assignment.hpp"

#include <algorithm>
#include <utility>

#include "symmflow/passes/heap_packer.hpp"

namespace symmflow::passes {

namespace {

// Packs one colour; returns its pool and writes (pool, offset) onto its buffers.
PoolPlan assign_colour(const LiveRanges::Colour& colour, int pool_index, int steps,
                       std::vector<BufferPlan>& buffers, std::vector<HeapEvent>& events) {
  std::vector<HeapInterval> intervals;
  for (int b : colour.buffers) {
    const BufferPlan& bp = buffers[size_t(b)];
    intervals.push_back({b, bp.first_step, bp.last_step, bp.bytes, kBufferAlignment});
  }
  HeapPacking packing = pack_heap(intervals, steps);
  for (size_t k = 0; k < colour.buffers.size(); ++k) {
    BufferPlan& bp = buffers[size_t(colour.buffers[k])];
    bp.pool = pool_index;
    bp.offset = packing.offsets[k];
  }
  for (const HeapPackEvent& e : packing.events) {
    HeapEvent::Kind kind =
        e.kind == HeapPackEvent::Kind::alloc ? HeapEvent::Kind::alloc : HeapEvent::Kind::free;
    events.push_back({e.step, kind, e.id, pool_index, e.offset, e.bytes});
  }
  PoolPlan pool;
  pool.name = colour.layout.str();
  pool.layout = colour.layout;
  pool.bytes = packing.size;
  pool.lower_bound = packing.lower_bound;
  pool.order = std::move(packing.order);
  pool.tried = std::move(packing.tried);
  return pool;
}

}  // namespace

MemoryPlan assign_buffers(LiveRanges ranges) {
  MemoryPlan plan;
  plan.buffers = std::move(ranges.buffers);
  plan.buffer_of = std::move(ranges.buffer_of);
  for (const LiveRanges::Colour& c : ranges.colours) {
    if (c.buffers.empty()) continue;
    int pool_index = int(plan.pools.size());
    plan.pools.push_back(assign_colour(c, pool_index, ranges.steps, plan.buffers, plan.events));
  }
  // The pools' traces merged: a buffer is allocated once and freed once, so (step, kind, buffer)
  // orders the events totally.
  std::sort(plan.events.begin(), plan.events.end(), [](const HeapEvent& a, const HeapEvent& b) {
    if (a.step != b.step) return a.step < b.step;
    if (a.kind != b.kind) return a.kind == HeapEvent::Kind::free;
    return a.buffer < b.buffer;
  });
  return plan;
}

}  // namespace symmflow::passes
