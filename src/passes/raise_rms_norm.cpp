// raise_rms_norm: the decompositions of RMSNorm that PyTorch hands a backend become one
// aten::rms_norm node (Note [rms_norm from its decompositions]):
//     u = x                          or  u = aten::_to_copy(x, dtype=f32)   (x bf16 or f16)
//     p = aten::pow.Tensor_Scalar(u, 2)
//     v = aten::mean.dim(p, [-1 or last], True)
//     e = aten::add.Scalar(v, eps)
//     r = aten::rsqrt(e)
//     m = aten::mul.Tensor(u, r)     (either order)
// followed, with an upcast, by aten::mul.Tensor(m, w) and a cast back to x's dtype (the form of
// torch.nn.RMSNorm and F.rms_norm), or by the cast back and then the product with w (the form of
// transformers' *RMSNorm); without one, by aten::mul.Tensor(m, w); w (either order) has x's dtype
// and shape [N], N the last dim. Without the weight product, the chain ends at m (or its cast).
// The whole chain becomes  o = aten::rms_norm(x, [N], w or None, eps)  in place of its last node,
// keeping that node's result name, so that fuse_allreduce_rmsnorm then sees the norm.
//
// Expects: a verified, functionalized graph (before fuse_allreduce_rmsnorm and fuse_pointwise).
// Guarantees: each matched chain is replaced by one node whose output takes over every use of the
//   chain's last value; the chain's nodes are erased. Nothing happens when a value inside the
//   chain has another use or is a graph output, the reduced dim is not the last, keepdim is false,
//   the exponent is not 2, eps is not a literal number, alpha is not 1, a cast has other
//   arguments than dtype, or the weight's dtype or shape differ.
// Refuses: nothing.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "passes/node_match.hpp"
#include "symmflow/passes/passes.hpp"

namespace symmflow::passes {

// Note [rms_norm from its decompositions]
// aten::rms_norm computes each row in the accumulation type (f32 for bf16 and f16) and rounds once
// at the end, which is exactly torch.nn.RMSNorm's decomposition with its f32 upcast. Two forms
// differ from it by roundings only: transformers' RMSNorm rounds to the input dtype before the
// weight product (at most one unit in the last place of that dtype apart), and a chain written
// without an upcast in bf16 or f16 rounds after every op (rms_norm is then the more accurate).
// Raising them too is the choice inductor makes for the same graphs (it computes a fused
// reduction in f32 and does not emulate intermediate roundings by default); it is what lets the
// all-reduce -> add -> norm of every decoder layer become one fused collective. f32 and f64
// chains differ only in the order of the sum of squares.

namespace {

using namespace node_match;  // the shared matchers (node_match.hpp)

// A plain dtype cast: _to_copy with a dtype and every other argument left to its default.
std::optional<DType> cast_to(const ir::Node* n) {
  if (!is_op(n, "aten::_to_copy")) return std::nullopt;
  const auto& schema = n->op()->schema();
  std::optional<DType> to;
  for (size_t i = 1; i < n->args().size(); ++i) {
    const ir::Arg& a = n->args()[i];
    const std::string& name = schema.args[i].name;
    if (name == "dtype" && a.kind == ir::Arg::Kind::literal && a.literal.is_dtype()) {
      to = a.literal.to_dtype();
    } else if (a.kind != ir::Arg::Kind::literal ||
               !(a.literal.is_none() || (name == "non_blocking" && a.literal.is_bool() &&
                                         !a.literal.to_bool()))) {
      return std::nullopt;
    }
  }
  return to;
}

struct Chain {
  ir::Value* x = nullptr;
  ir::Value* weight = nullptr;
  double eps = 0;
  std::vector<ir::Node*> nodes;  // in graph order; the last one is replaced
};

// pow -> mean -> add -> rsqrt -> mul from `rsqrt`, filling x, eps and nodes; the mul's result.
ir::Value* match_core(const ir::Graph& g, ir::Node* rsqrt, Chain& c, ir::Value*& u) {
  ir::Value* e = value_arg(*rsqrt, "self");
  ir::Node* add = e ? e->producer() : nullptr;
  if (!is_op(add, "aten::add.Scalar") || !sole_use(g, e) || !literal_is(arg(*add, "alpha"), 1))
    return nullptr;
  const ir::Arg* eps = arg(*add, "other");
  ir::Value* v = value_arg(*add, "self");
  ir::Node* mean = v ? v->producer() : nullptr;
  if (!eps || eps->kind != ir::Arg::Kind::literal || !eps->literal.is_number() ||
      !is_op(mean, "aten::mean.dim") || !sole_use(g, v))
    return nullptr;
  ir::Value* p = value_arg(*mean, "self");
  ir::Node* pow = p ? p->producer() : nullptr;
  if (!is_op(pow, "aten::pow.Tensor_Scalar") || !sole_use(g, p) ||
      !literal_is(arg(*pow, "exponent"), 2))
    return nullptr;
  u = value_arg(*pow, "self");
  const int64_t rank = int64_t(u->type().shape.size());
  const ir::Arg* dim = arg(*mean, "dim");
  const ir::Arg* keep = arg(*mean, "keepdim");
  const ir::Arg* dtype = arg(*mean, "dtype");
  if (rank == 0 || !dim || dim->kind != ir::Arg::Kind::literal || !dim->literal.is_int_list() ||
      dim->literal.to_int_list().size() != 1 || !keep || !keep->literal.is_bool() ||
      !keep->literal.to_bool() || (dtype && !dtype->literal.is_none()))
    return nullptr;
  const int64_t d = dim->literal.to_int_list()[0];
  if (d != -1 && d != rank - 1) return nullptr;
  ir::Value* r = rsqrt->output();
  ir::Node* mul = sole_use(g, r);
  if (other_factor(mul, r) != u) return nullptr;
  c.eps = eps->literal.to_double();
  c.nodes = {pow, mean, add, rsqrt, mul};
  return mul->output();
}

// Takes `w` as the weight when it is a [N] tensor of x's dtype (N the last dim of x).
bool take_weight(Chain& c, ir::Value* w) {
  if (!w || w->type().dtype != c.x->type().dtype ||
      w->type().shape != Shape{c.x->type().shape.back()})
    return false;
  c.weight = w;
  return true;
}

bool match(const ir::Graph& g, ir::Node* rsqrt, Chain& c) {
  ir::Value* u = nullptr;
  ir::Value* m = match_core(g, rsqrt, c, u);
  if (!m) return false;
  ir::Node* upcast = u->producer();
  const std::optional<DType> up = cast_to(upcast);
  // The upcast is erased with the chain: pow and the product must be its only uses.
  if (up && *up == DType::f32 && upcast->output()->type().dtype == DType::f32 &&
      u->uses().size() == 2 && !is_output(g, u)) {
    c.x = value_arg(*upcast, "self");
    const DType xt = c.x->type().dtype;
    if (xt != DType::bf16 && xt != DType::f16) return false;
    c.nodes.insert(c.nodes.begin(), upcast);
    ir::Node* next = sole_use(g, m);
    if (std::optional<DType> down = cast_to(next); down && *down == xt) {  // transformers' form
      c.nodes.push_back(next);
      ir::Node* mul = sole_use(g, next->output());
      if (take_weight(c, other_factor(mul, next->output()))) c.nodes.push_back(mul);
      return true;
    }
    ir::Node* cast = next ? sole_use(g, next->output()) : nullptr;  // torch's form
    const std::optional<DType> back = cast_to(cast);
    if (!take_weight(c, other_factor(next, m)) || !back || *back != xt) return false;
    c.nodes.push_back(next);
    c.nodes.push_back(cast);
    return true;
  }
  c.x = u;
  if (!is_floating(c.x->type().dtype)) return false;
  ir::Node* mul = sole_use(g, m);
  if (take_weight(c, other_factor(mul, m))) c.nodes.push_back(mul);
  return true;
}

void rewrite(ir::Graph& g, const Chain& c) {
  ir::Node* last = c.nodes.back();
  ir::Value* result = last->output();
  const std::string name = result->name();
  std::vector<ir::Arg> args = {
      ir::Arg::of(c.x),
      ir::Arg::of_literal(std::vector<int64_t>{c.x->type().shape.back()}),
      c.weight ? ir::Arg::of(c.weight) : ir::Arg::of_literal(symmflow::Value(None{})),
      ir::Arg::of_literal(c.eps)};
  ir::Node* norm = g.add_op("aten::rms_norm", std::move(args), {}, "", last);
  norm->set_loc(last->loc());
  g.replace_uses(result, norm->output());
  for (auto it = c.nodes.rbegin(); it != c.nodes.rend(); ++it) g.erase(*it);
  g.rename(norm->output(), name);
}

}  // namespace

void raise_rms_norm(ir::Graph& graph) {
  for (ir::Node* n : calls_of(graph, "aten::rsqrt")) {
    Chain c;
    if (!match(graph, n, c)) continue;
    const ir::Value* result = c.nodes.back()->output();
    if (result->type().dtype != c.x->type().dtype || result->type().shape != c.x->type().shape)
      continue;
    rewrite(graph, c);
  }
}

}  // namespace symmflow::passes
