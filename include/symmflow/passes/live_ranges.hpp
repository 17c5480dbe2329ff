// Live ranges: the first layer of the memory planner (plan_memory = live_ranges -> pack_heap per
// colour -> assign_buffers). From a scheduled graph to buffers, their aliases, the step range each
// buffer must own its bytes, and the colour (pool) each is packed into.
//
// Expects: a graph whose node order is the execution order (schedule has run) and whose values
//   carry layouts (realize_symm_mem); a non-input value left unassigned is treated as regular, so
//   hand-written graphs plan too.
// Guarantees:
//   - aliases: one BufferPlan per value that has memory, in definition order. An op return that
//     aliases an argument (views, in-place results) shares its base's buffer (alias_of = the base
//     buffer that owns memory; no colour); the base lives as long as any of its aliases. Views of
//     graph inputs have no buffer (caller memory).
//   - live ranges over the schedule: a buffer lives from the step that defines it to the last
//     step that reads or writes it (or any alias of it); graph outputs and writeback values live
//     to steps.size(); a copy-in of a graph input (attrs["copy"] == "input") lives for the whole
//     run (from step 0 to steps.size()), so a caller may write its input into that staging buffer
//     before the run and finds it unchanged after (zero-copy binding: the staging buffer is the
//     caller's input tensor, which no other buffer may reuse); a symm buffer that peers write
//     through a one_sided op (put_signal's or wait_signal's dst) lives for the whole run (Note
//     [peer-written buffers]), while one that a synchronising collective writes in place or as
//     its out (two_shot_all_reduce_'s input, collective_permute_out's out) keeps its ordinary
//     range, which covers the op's step (Note [synchronised peer writes]); the src of symm_mem::get, which peers read without a closing barrier, lives until
//     the group's next synchronising op (Note [unsynchronised peer reads]).
//   - colours: [0] regular, then one symm[g] per group in order of first definition (every rank
//     allocates the heaps in this order); each colour lists its owning buffers in buffer order.
//   - BufferPlan::pool is -1 and offset 0 here: assign_buffers fills them.
// Refuses: a value placed in symm[g] for an undeclared group g (InvalidUsage naming the value).
#pragma once

#include <unordered_map>
#include <vector>

#include "symmflow/passes/plan.hpp"

namespace symmflow::passes {

struct LiveRanges {
  struct Colour {
    ir::Layout layout;
    std::vector<int> buffers;  // owning buffers (no aliases), in buffer order
  };
  int steps = 0;  // the graph's node count: outputs live to this step
  std::vector<BufferPlan> buffers;
  std::unordered_map<const ir::Value*, int> buffer_of;
  std::vector<Colour> colours;  // [0] regular, then symm pools in order of first definition
};

LiveRanges compute_live_ranges(const ir::Graph& graph);

}  // namespace symmflow::passes
