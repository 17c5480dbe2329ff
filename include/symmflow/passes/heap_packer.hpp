// The heap packer: the memory planner's heap algorithm, on plain intervals (XLA's heap simulator
// layer). It knows nothing of graphs, values or colours: the caller gives the intervals of one
// colour (pool) and gets an offset for each, the pool's size, its lower bound and the alloc/free
// trace. plan_memory (live_ranges -> pack_heap -> assign_buffers) is its one user in the compiler;
// tests/passes_b/heap_packer_test.cpp tests it on hand-made and random interval sets.
//
// Expects: intervals with 0 <= start <= end <= horizon (inclusive steps) and a power-of-two
//   alignment each; ids are the caller's (echoed in the events; any values, repeats allowed).
// Guarantees:
//   - an interval's footprint is its bytes rounded up to its alignment; its offset is a multiple
//     of its alignment; two intervals that share a step never overlap in [offset, offset +
//     footprint). A zero-byte interval takes no memory: it sits at the bottom of the packed
//     region (or at its place in the always-live stack) and changes no other offset.
//   - Note [always-live buffers]: intervals live over the whole horizon (start == 0 and end ==
//     horizon) overlap everything, so they are stacked at the bottom of the pool in input order,
//     and only the others are packed above them. Any packing pays their sum at every step, so this
//     loses nothing, and the orders below no longer see O(n) overlaps per interval.
//   - the others are best-fit packed in three orders — "start" (sweep in start order, ties by
//     size desc, then input order), "size" (global decreasing-size best fit over the intervals
//     live at the same time), "end" (the start sweep run backwards in time) — and the smallest
//     pool kept (ties: the first). Each order is O(n log n) (with one alignment: mixed ones may
//     scan more gaps); "size" gives up (recorded in `tried` with size 0) once the overlapping
//     pairs it has looked at exceed a budget linear in n log n.
//   - size >= lower_bound = the most footprint bytes live at one step; with one alignment for
//     every interval, size <= the sum of the footprints (Note [mixed alignments]).
//   - deterministic: the same input gives the same output.
//   - events: every interval (zero-byte ones too) is allocated at `start` and freed at `end + 1`;
//     sorted by step, frees before allocations at a step, then by id, then input order.
// Refuses: an interval outside [0, horizon], with start > end, or an alignment that is not a
//   power of two (InvalidUsage naming the interval's id).
//
// Note [mixed alignments]: the planner packs every buffer at 64 bytes, so each footprint is a
// multiple of every alignment and no offset ever needs padding; the orders then run exactly as
// they did before the packer had alignments. For intervals with different alignments, a gap is
// taken only if the item fits after rounding the gap's start up, and the padding left below an
// item (in a gap or on top of the heap) stays free for later ones; the always-live stack is
// rounded up to the largest packed alignment. The pool may then exceed the sum of the footprints
// by at most (alignment - 1) per interval.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace symmflow::passes {

struct HeapInterval {
  int id = 0;             // the caller's name for it (plan_memory: the buffer index)
  int start = 0;          // first step it is live (inclusive)
  int end = 0;            // last step it is live (inclusive)
  size_t bytes = 0;       // as requested (rounded up to `alignment` for packing)
  size_t alignment = 64;  // a power of two
};

// One allocation or release of the kept packing.
struct HeapPackEvent {
  enum class Kind { alloc, free };
  int step = 0;  // alloc: start; free: end + 1
  Kind kind = Kind::alloc;
  int id = 0;
  size_t offset = 0;
  size_t bytes = 0;  // as requested (not rounded)
};

struct HeapPacking {
  std::vector<size_t> offsets;  // one per interval, in input order
  size_t size = 0;              // the pool's size: the kept order's peak
  size_t lower_bound = 0;       // the most footprint bytes live at one step
  std::string order;            // the order kept: "start", "size" or "end"
  // Every order tried with the pool size it gave (0: given up, too many overlapping intervals).
  std::vector<std::pair<std::string, size_t>> tried;
  std::vector<HeapPackEvent> events;
};

// Packs the intervals of one pool over the steps [0, horizon].
HeapPacking pack_heap(const std::vector<HeapInterval>& intervals, int horizon);

}  // namespace symmflow::passes
