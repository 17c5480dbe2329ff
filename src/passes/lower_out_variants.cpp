// lower_out_variants: marks the nodes the executor runs through their `out` variant, writing
// straight into the buffers the planner assigns.
//
// Expects: a verified graph (normally functionalized, with layouts from realize_symm_mem).
// Guarantees: every `op` node whose op returns only fresh tensors (no return aliases an argument,
//   no argument is written) and has a linked out variant (OpDef::out_variant()) whose out
//   arguments match its returns one to one (same count) gets attrs["out_variant"] = that op's
//   qualified name ("aten::mm.out", "symm_mem::one_shot_all_reduce_out"); the executor calls it
//   with the planned buffers as its out args. Every other node is left alone: ops without an out
//   variant run their functional kernel into planned outputs (call_bound_into); views, mutating
//   ops, functional<op>, fused and copy nodes are not touched; a stale "out_variant" attribute on
//   a node that no longer qualifies is removed. Idempotent; linear in the graph.
// Refuses: nothing (a link to an op that is not registered is an internal error).
#include <fmt/format.h>

#include "symmflow/passes/passes.hpp"

namespace symmflow::passes {

namespace {

// The out variant to call for `node`, or nullptr when it runs its functional kernel.
const OpDef* out_variant_of(const ir::Node& node) {
  if (node.kind() != ir::NodeKind::op) return nullptr;
  const OpDef& op = *node.op();
  const AliasAnalysis& aliases = op.aliases();
  if (op.out_variant().empty() || aliases.is_mutable() || aliases.is_out_variant()) return nullptr;
  if (op.schema().returns.empty() || aliases.list_return) return nullptr;
  for (int a : aliases.returns_alias) {
    if (a >= 0) return nullptr;  // a view: no buffer of its own
  }
  const OpDef* out = op.out_op();
  SF_CHECK(out, "internal: {} links out variant '{}', which is not registered (node {})", op.name(),
           op.out_variant(), node.display_name());
  if (out->aliases().out_args.size() != node.outputs().size()) return nullptr;
  return out;
}

}  // namespace

void lower_out_variants(ir::Graph& graph) {
  for (ir::Node* node : graph.nodes()) {
    if (const OpDef* out = out_variant_of(*node)) {
      node->attrs()["out_variant"] = out->name();
    } else if (node->kind() == ir::NodeKind::op) {
      node->attrs().erase("out_variant");
    }
  }
}

}  // namespace symmflow::passes
