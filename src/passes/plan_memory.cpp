// plan_memory: buffer assignment for a scheduled graph, in XLA's layers (DESIGN "Memory"):
//   1. live ranges (live_ranges.hpp): aliases -> buffers -> [first def, last use] per colour,
//      with the whole-run ranges of staging and of buffers one_sided ops let peers write, and
//      the extended ranges of peer-read buffers;
//   2. the heap packer (heap_packer.hpp), IR-free: each colour's intervals best-fit packed in
//      several orders, the smallest pool kept, beside its lower bound and its alloc/free trace;
//   3. assignment (buffer_assignment.hpp): (pool, offset, size) back onto the values' buffers.
//
// Expects: a graph whose node order is the execution order (schedule has run) and whose values
//   carry layouts (realize_symm_mem); unassigned values are planned as regular.
// Guarantees: the MemoryPlan of the three layers' contracts: pools ordered regular first, then
//   symm pools in order of first definition (every rank allocates the heaps in this order); no two
//   buffers of a pool live at a common step overlap; each pool's peak beside its lower bound.
// Refuses: a value placed in symm[g] for an undeclared group g (InvalidUsage naming the value).
#include "symmflow/passes/plan_memory.hpp"

#include "symmflow/passes/buffer_assignment.hpp"
#include "symmflow/passes/live_ranges.hpp"

namespace symmflow::passes {

MemoryPlan plan_memory(const ir::Graph& graph) {
  return assign_buffers(compute_live_ranges(graph));
}

}  // namespace symmflow::passes
