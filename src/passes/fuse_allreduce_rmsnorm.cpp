// fuse_allreduce_rmsnorm: the end of a tensor-parallel block,
//     r = symm_mem::one_shot_all_reduce(h, op, g)
//     (v = aten::reshape(r, ...) ... back to r's shape: transformers' tp_plan flattens the
//      tokens and restores them between the all-reduce and the add)
//     s = aten::add.Tensor(r or v, residual)       (or (residual, r); alpha 1)
//     o = aten::rms_norm(s, [N], weight, eps)      (N the last dim, weight a tensor, eps given)
// becomes o, s = symm_mem::fused_all_reduce_add_rms_norm(h, residual, weight, eps, op, g), whose
// contract is exactly that composition, roundings included (Note [fused all-reduce add rms_norm]
// in src/ops/symm_mem/defs.cpp): on cpu the same bits, on GPUs one kernel (the sum never leaves
// the chip between the three steps).
//
// Expects: a verified, functionalized graph (before fuse_pointwise, which would take the add).
// Guarantees: each match is replaced by one node at the add's position whose outputs take over
//   every use of o and s (s may have other uses: it is the op's residual_out); the three nodes
//   (and the reshapes between r and the add) are erased and the new outputs keep the names of o and s. Semantics are unchanged: the op's
//   contract is exactly the composition. Nothing happens when a condition fails: r used
//   elsewhere or returned (the fused op does not give the sum before the add; the same for a
//   reshape between it and the add, or reshapes that end in another shape), shapes or dtypes
//   of r, residual, s or weight differ, alpha other than 1, weight defined after the add, a
//   normalized_shape other than the last dim, weight or eps None.
// Refuses: nothing.
#include <algorithm>
#include <string>
#include <vector>

#include "passes/node_match.hpp"
#include "symmflow/passes/passes.hpp"

namespace symmflow::passes {

namespace {

using node_match::arg;
using node_match::calls_of;
using node_match::is_op;
using node_match::literal_is;

constexpr std::string_view kFused = "symm_mem::fused_all_reduce_add_rms_norm";

struct Match {
  ir::Node* all_reduce = nullptr;
  std::vector<ir::Node*> reshapes;  // between the all-reduce and the add, in order
  ir::Node* add = nullptr;
  ir::Node* norm = nullptr;
  ir::Value* residual = nullptr;
};

// The rms_norm fed by the add fed by `all_reduce`, when the pattern holds.
bool match(ir::Graph& g, ir::Node* all_reduce, Match& m) {
  auto returned = [&](ir::Value* v) {
    return std::find(g.outputs().begin(), g.outputs().end(), v) != g.outputs().end();
  };
  ir::Value* r = all_reduce->output();
  std::vector<ir::Node*> reshapes;
  while (r->uses().size() == 1 && is_op(r->uses()[0], "aten::reshape") && !returned(r) &&
         arg(*r->uses()[0], "self")->value == r) {
    reshapes.push_back(r->uses()[0]);
    r = reshapes.back()->output();
  }
  if (!reshapes.empty() && r->type().shape != all_reduce->output()->type().shape) return false;
  if (r->uses().size() != 1 || !is_op(r->uses()[0], "aten::add.Tensor") || returned(r))
    return false;
  ir::Node* add = r->uses()[0];
  const ir::Arg* self = arg(*add, "self");
  const ir::Arg* other = arg(*add, "other");
  if (!self || !other || self->kind != ir::Arg::Kind::value ||
      other->kind != ir::Arg::Kind::value || !literal_is(arg(*add, "alpha"), 1.0))
    return false;
  ir::Value* residual = self->value == r ? other->value : self->value;
  if (residual == r || residual->type().shape != r->type().shape ||
      residual->type().dtype != r->type().dtype)
    return false;
  ir::Value* s = add->output();
  if (s->type().shape != r->type().shape || s->type().dtype != r->type().dtype ||
      s->type().shape.empty())
    return false;
  for (ir::Node* use : s->uses()) {
    if (!is_op(use, "aten::rms_norm") || arg(*use, "input")->value != s) continue;
    const ir::Arg* shape = arg(*use, "normalized_shape");
    const ir::Arg* weight = arg(*use, "weight");
    const ir::Arg* eps = arg(*use, "eps");
    if (shape->kind != ir::Arg::Kind::literal || !shape->literal.is_int_list() ||
        shape->literal.to_int_list() != std::vector<int64_t>{s->type().shape.back()})
      continue;
    if (weight->kind != ir::Arg::Kind::value || weight->value->type().dtype != s->type().dtype ||
        weight->value->type().shape != Shape{s->type().shape.back()})
      continue;
    if (eps->kind != ir::Arg::Kind::literal || !eps->literal.is_number()) continue;
    if (ir::Node* p = weight->value->producer(); p && g.position(p) > g.position(add)) continue;
    m = {all_reduce, reshapes, add, use, residual};
    return true;
  }
  return false;
}

void rewrite(ir::Graph& g, const Match& m) {
  ir::Value* o = m.norm->output();
  ir::Value* s = m.add->output();
  const std::string o_name = o->name(), s_name = s->name();
  std::vector<ir::Arg> args = {
      *arg(*m.all_reduce, "input"),           ir::Arg::of(m.residual),
      *arg(*m.norm, "weight"),                *arg(*m.norm, "eps"),
      *arg(*m.all_reduce, "reduce_op"),       *arg(*m.all_reduce, "group_name")};
  for (ir::Arg& a : args) a.defaulted = false;
  ir::Node* fused = g.add_op(kFused, std::move(args), {}, "", m.add);
  fused->set_loc(m.norm->loc());
  g.replace_uses(o, fused->output(0));
  g.replace_uses(s, fused->output(1));
  g.erase(m.norm);
  g.erase(m.add);
  for (auto it = m.reshapes.rbegin(); it != m.reshapes.rend(); ++it) g.erase(*it);
  g.erase(m.all_reduce);
  g.rename(fused->output(0), o_name);
  g.rename(fused->output(1), s_name);
}

}  // namespace

void fuse_allreduce_rmsnorm(ir::Graph& graph) {
  for (ir::Node* n : calls_of(graph, "symm_mem::one_shot_all_reduce")) {
    Match m;
    if (match(graph, n, m)) rewrite(graph, m);
  }
}

}  // namespace symmflow::passes
