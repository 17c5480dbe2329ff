// The passes of the pipeline, in order (DESIGN.md):
//   verify -> functionalize -> rewrite_patterns -> raise_rms_norm -> raise_rotary -> raise_gqa ->
//   fuse_allreduce_rmsnorm -> decompose_collective_matmul -> fuse_pointwise -> realize_symm_mem ->
//   lower_out_variants -> schedule -> reinplace -> plan_memory -> emit_plan
// (rewrite_patterns, the slot of the patterns plugins register, is in rewrite_patterns.hpp.)
// Each is a plain function over the graph, defined in src/passes/<name>.cpp whose top comment is
// its contract (what it expects, what it guarantees, what it refuses). Conventions shared by the
// passes, the planner and the executor:
//   - after functionalize, no node writes an argument: in-place and out calls became their
//     functional variant (linked in the registry) or functional<op> nodes; graph-input mutations
//     are Graph::writebacks.
//   - fuse_pointwise makes `fused` nodes whose body is a chain of same-shape elementwise aten ops.
//   - realize_symm_mem assigns every value a Layout (symm[group] or regular) and adds `copy` nodes
//     with attrs {"reason": why, "copy": "input" | "identity"}; a copy-in of a graph input
//     ("input") is skipped at run time when the caller bound that input straight into the heap.
//   - lower_out_variants sets attrs["out_variant"] = "ns::op.out" on nodes executed through their
//     out variant with planner-owned outputs.
//   - schedule reorders nodes (data, mutation and per-group communication order).
//   - reinplace turns functional<op_> nodes back into the mutating op when the mutated value is
//     dead afterwards; a remaining functional node copies its written arguments first and carries
//     attrs["reason"] saying why (counted as a compiler-added copy).
#pragma once

#include "symmflow/ir/graph.hpp"

namespace symmflow::passes {

void functionalize(ir::Graph& graph);
void raise_rms_norm(ir::Graph& graph);
void raise_rotary(ir::Graph& graph);
void raise_gqa(ir::Graph& graph);
void fuse_allreduce_rmsnorm(ir::Graph& graph);
void decompose_collective_matmul(ir::Graph& graph);
void fuse_pointwise(ir::Graph& graph);
void realize_symm_mem(ir::Graph& graph);
void lower_out_variants(ir::Graph& graph);
void schedule(ir::Graph& graph);
void reinplace(ir::Graph& graph);

// Ops fuse_pointwise may put into a fused body (and the fused executor runs): tagged pointwise,
// neither in_place nor out (Note [op tags]).
bool is_fusible_pointwise(const OpDef& op);

}  // namespace symmflow::passes
