// The plan: the compiled form of a graph, typed so that exec never reads the IR. Made by
// plan_memory + emit_plan; run by exec::Executable.
//
// Contract (Note [typed plan]): every fact exec needs is resolved here, once, by emit_plan:
//   - values: every tensor the steps read or define, by id (graph inputs first, then each step's
//     results in order), with its type and planned buffer;
//   - steps, in schedule order, each with its kind, the op handle it calls (the op and, when
//     lower_out_variants lowered it, the out variant called instead), its operands bound to the
//     called op's schema (value ids, literals with defaults filled, rank-relative ints), its
//     results, which operands the called op writes, which results alias an operand, the new
//     values of a functional<op>, its copy kind and reason (copy and functional<op> steps), and
//     for a communication op its group, group size, bytes and the algorithm each backend runs
//     (kernels/algorithm.hpp's rule, the one `explain` prints);
//   - outputs and writebacks by value id, and the groups whose runs start with a barrier
//     (Note [barrier before each run] in exec/executable.cpp) with the barrier op resolved;
//   - pools, buffers, copies and heap events of the memory plan.
// `graph` and PlanStep::node stay reachable for printing and diagnostics (names, source lines)
// only; `PlanStep::body` is a fused region's body program, which the fused executors run.
// Plan::str() prints the plan like a program (see emit_plan.cpp).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "symmflow/ir/graph.hpp"
#include "symmflow/ops/value.hpp"
#include "symmflow/kernels/algorithm.hpp"

namespace symmflow::passes {

struct PoolPlan {
  std::string name;  // "regular", "symm[tp]"
  ir::Layout layout;
  size_t bytes = 0;        // planned peak (the pool's size)
  size_t lower_bound = 0;  // the most bytes live at one step (sizes rounded up to 64 B)
  std::string order;       // the packing order kept: "start", "size" or "end"
  // Every order tried with its peak (0: given up, too many overlapping buffers).
  std::vector<std::pair<std::string, size_t>> tried;
};

// One allocation or release of the kept packing, in step order (frees before allocations at a
// step). A buffer is allocated at its first step and freed at last_step + 1.
struct HeapEvent {
  enum class Kind { alloc, free };
  int step = 0;
  Kind kind = Kind::alloc;
  int buffer = -1;
  int pool = -1;
  size_t offset = 0;
  size_t bytes = 0;
};

struct BufferPlan {
  std::string name;  // the value's name
  ir::TensorType type;
  int pool = -1;     // index into pools; -1 for a view (aliases `alias_of`'s memory, made by its
                     // step at run time) or an argument mutated in place
  int alias_of = -1;  // buffer index for views / in-place results
  size_t offset = 0;  // bytes into the pool, 64-byte aligned
  size_t bytes = 0;
  int first_step = 0;  // step that defines it
  int last_step = 0;   // last step that reads it (steps.size() for graph outputs)
  bool intermediate = true;  // false for graph outputs
};

// The copies the compiler adds (DESIGN.md: every copy is counted and shown with its reason).
enum class CopyKind {
  none,        // not a copy
  input,       // copy-in of a graph input into its staging buffer (skipped when the caller binds
               // the staging buffer: Note [zero-copy input binding] in exec/executable.cpp)
  identity,    // a copy node that makes a value contiguous or places it in another pool
  functional,  // functional<op>: the op writes copies of its written arguments
  writeback,   // the final value of a mutated graph input, copied into the caller's tensor
};
const char* copy_kind_name(CopyKind kind);  // "input", "identity", ...

// Why a copy exists; the `reason` text of CopyInfo / PlanStep names the values, ops and groups.
enum class CopyReason {
  none,
  graph_input_to_symm,   // a graph input (caller memory) feeds a symm arg
  symm_placement,        // a symm arg that cannot be made in place (a view of an input, a value
                         // already in another pool, a strided view)
  strided_fused_input,   // a strided view read by a fused region (the fused executor reads flat)
  peer_race,             // copied before the barrier after which peers put into it (signal ops)
  old_value_needed,      // functional<op> writes an argument whose old value is still needed
  input_mutated,         // writeback of a mutated graph input
};
const char* copy_reason_name(CopyReason reason);  // "graph_input_to_symm", ...

struct CopyInfo {
  int step = -1;  // steps.size() for writebacks
  CopyKind kind = CopyKind::none;
  CopyReason cause = CopyReason::none;
  std::string reason;  // why the compiler added it, as text naming values, ops and groups
  size_t bytes = 0;
};

// A tensor of the plan.
struct PlanValue {
  std::string name;
  ir::TensorType type;
  int buffer = -1;       // index into buffers; -1 without planned memory (caller memory)
  int graph_input = -1;  // index among the graph inputs, or -1
};

// One argument of a step, bound to the called op's schema.
struct Operand {
  enum class Kind { value, value_list, literal, rank_relative };
  Kind kind = Kind::literal;
  int value = -1;           // value: its id
  std::vector<int> values;  // value_list: their ids
  Value literal;            // literal (for an out variant, defaults filled in)
  int64_t rank_offset = 0;  // rank_relative: (rank + k) mod group size, resolved per rank by exec
};

// The op a step calls. `op` is the node's op (for functional<op> the mutating op whose copies it
// writes); `out_variant`, when set, is the out variant called instead (lower_out_variants).
struct OpHandle {
  const OpDef* op = nullptr;
  const OpDef* out_variant = nullptr;
  const OpDef* called() const { return out_variant ? out_variant : op; }
};

enum class StepKind {
  call,        // call op.called() on args; results as below
  functional,  // functional<op>: copy each written operand into its new value, then call op
  copy,        // results[0] <- args[0] (copy kind and reason set)
  fused,       // a fused pointwise region: body over args (value ids) into results
};

struct PlanStep {
  StepKind kind = StepKind::call;
  OpHandle op;                   // call, functional
  std::vector<Operand> args;     // call/functional: one per schema argument of op.called();
                                 // copy: the source; fused: the region's inputs
  std::vector<int> results;      // value ids the step defines, in the node's output order
  // call without an out variant: per result, the operand index it aliases (a view or an in-place
  // result, made by the kernel), or -1 for a fresh result written into its planned buffer.
  std::vector<int> result_aliases;
  std::vector<int> written;      // operand indices op.called() writes (out arguments included)
  // functional: (written operand, value id of its new value), in written-argument order.
  std::vector<std::pair<int, int>> new_values;
  CopyKind copy = CopyKind::none;  // copy and functional steps
  CopyReason cause = CopyReason::none;
  std::string reason;   // the cause as text naming values, ops and groups
  size_t copy_bytes = 0;
  std::string group;    // the op's group ("" when it has none)
  int group_size = 0;   // ranks of `group` (the graph's declaration)
  int64_t bytes = 0;    // the largest tensor operand, in bytes
  kernels::AlgorithmChoice algorithm;  // communication ops: what each backend runs (empty otherwise)
  const ir::Graph* body = nullptr;  // fused: the region's body program
  const ir::Node* node = nullptr;   // printing and diagnostics only (display name, source line)
};

struct Writeback {
  int input = -1;  // graph input index
  int value = -1;  // value id of its final value
};

// Note [barrier before each run] (exec/executable.cpp): a group with a peer_written buffer.
struct EntryBarrier {
  std::string group;
  const OpDef* op = nullptr;  // symm_mem::barrier, called with (group, 0) on a device
};

struct Plan {
  std::shared_ptr<ir::Graph> graph;  // the optimised graph: printing and diagnostics only
  std::vector<PlanStep> steps;
  std::vector<PlanValue> values;
  std::vector<int> inputs;   // value ids of the graph inputs
  std::vector<int> outputs;  // value ids of the graph outputs
  std::vector<Writeback> writebacks;
  std::vector<EntryBarrier> entry_barriers;
  std::vector<PoolPlan> pools;
  std::vector<BufferPlan> buffers;
  std::unordered_map<const ir::Value*, int> buffer_of;  // every non-input value that has memory
  std::vector<CopyInfo> copies;
  std::vector<HeapEvent> events;  // the planner's alloc/free events

  std::string str() const;  // the plan printed like a program (see emit_plan.cpp)
  int find_value(std::string_view name) const;  // value id, or -1
};

}  // namespace symmflow::passes
