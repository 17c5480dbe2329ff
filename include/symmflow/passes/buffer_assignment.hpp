// Buffer assignment: the last layer of the memory planner (plan_memory = live_ranges -> pack_heap
// per colour -> assign_buffers). Packs each colour of the live ranges with the heap packer and
// writes (pool, offset) back onto the buffers of the IR values.
//
// Expects: `ranges` from compute_live_ranges (colours, owning buffers and their step ranges).
// Guarantees:
//   - one PoolPlan per non-empty colour, in colour order (regular first, then symm pools in order
//     of first definition): {name = layout.str(), layout, bytes = the packed size, lower_bound,
//     the order kept, every order tried}; each owning buffer gets its pool index and offset, sizes
//     rounded up to 64 bytes (kBufferAlignment) for packing; aliases keep pool -1.
//   - no two buffers of a pool live at a common step overlap in [offset, offset + bytes);
//   - MemoryPlan::events: the alloc/free events of every pool's kept packing, in step order, frees
//     before allocations at a step, then by buffer index.
// Refuses: nothing (the heap packer's refusals cannot happen on live ranges).
#pragma once

#include <cstddef>

#include "symmflow/passes/live_ranges.hpp"
#include "symmflow/passes/plan_memory.hpp"

namespace symmflow::passes {

// Every buffer's offset is a multiple of this (and its size rounded up to it for packing).
inline constexpr size_t kBufferAlignment = 64;

MemoryPlan assign_buffers(LiveRanges ranges);

}  // namespace symmflow::passes
