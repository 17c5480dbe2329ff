// raise_rotary: the rotary position embedding as PyTorch traces it (transformers'
// apply_rotary_pos_emb, torchtitan's and most Llama-style models' rotate_half form) becomes one
// fused::rotary_embedding node (Note [rotary from its decomposition]):
//     x1 = aten::slice.Tensor(x, last, 0, h)          (h = D / 2, D the last dim of x; step 1)
//     x2 = aten::slice.Tensor(x, last, h, end >= D)
//     n  = aten::neg(x2)
//     r  = aten::cat([n, x1], last or -1)
//     a  = aten::mul.Tensor(x, cos)                   (either order)
//     b  = aten::mul.Tensor(r, sin)                   (either order)
//     o  = aten::add.Tensor(a, b)                     (either order, alpha 1)
// becomes  o = fused::rotary_embedding(x, cos, sin)  in place of the add, keeping its name.
//
// Expects: a verified, functionalized graph (before fuse_pointwise, which would otherwise fuse the
//   products and the sum into a region of their own around the slices and the cat).
// Guarantees: each matched chain is replaced by one node whose output takes over every use of the
//   add's value; the chain's nodes are erased (a slice with another use stays). The result is
//   bitwise the chain's (the op's definition: Note [fused compute ops]).
// Refuses: nothing; a chain is left alone when a value in it (other than the slices) has another
//   use or is a graph output, x's last dim is odd, the slices are not x's halves along its last
//   dim, x, cos, sin and the result do not share one floating dtype, or cos or sin does not
//   broadcast to x's shape (the products would be larger than x).
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "passes/node_match.hpp"
#include "symmflow/passes/passes.hpp"

namespace symmflow::passes {

// Note [rotary from its decomposition]
// Four kernels (a neg, a cat of two copies, and the fused products and sum) become
// one, which reads x, cos and sin once: in the decoder layer of a Llama-style model, q and k each
// take this chain. The op's result is the chain's bit for bit, so raising it is always allowed;
// it is still a fusion (SYMMFLOW_SKIP_PASSES=raise_rotary turns it off: Note [skipping fusions]).

namespace {

using namespace node_match;  // the shared matchers (node_match.hpp)

// An int literal argument, or std::nullopt (None, or not a literal int).
std::optional<int64_t> int_arg(const ir::Node& n, std::string_view name) {
  const ir::Arg* a = arg(n, name);
  if (!a || a->kind != ir::Arg::Kind::literal || !a->literal.is_int()) return std::nullopt;
  return a->literal.to_int();
}

bool is_last_dim(std::optional<int64_t> dim, size_t rank) {
  return dim && (*dim == -1 || *dim == int64_t(rank) - 1);
}

// A slice of `x` along its last dim with step 1: [start, end) clamped as PyTorch clamps them.
std::optional<std::pair<int64_t, int64_t>> last_dim_slice(const ir::Node* n, const ir::Value* x) {
  if (!is_op(n, "aten::slice.Tensor") || value_arg(*n, "self") != x) return std::nullopt;
  const size_t rank = x->type().shape.size();
  const int64_t size = x->type().shape.back();
  const ir::Arg* step = arg(*n, "step");
  if (!is_last_dim(int_arg(*n, "dim"), rank) || (step && !literal_is(step, 1))) return std::nullopt;
  auto bound = [&](std::string_view name, int64_t none) -> std::optional<int64_t> {
    const ir::Arg* a = arg(*n, name);
    if (!a || (a->kind == ir::Arg::Kind::literal && a->literal.is_none())) return none;
    std::optional<int64_t> v = int_arg(*n, name);
    if (!v) return std::nullopt;
    int64_t b = *v < 0 ? *v + size : *v;
    return std::clamp<int64_t>(b, 0, size);
  };
  std::optional<int64_t> start = bound("start", 0), end = bound("end", size);
  if (!start || !end) return std::nullopt;
  return std::pair{*start, *end};
}

struct Chain {
  ir::Value* x = nullptr;
  ir::Value* cos = nullptr;
  ir::Value* sin = nullptr;
  ir::Node* add = nullptr;
  std::vector<ir::Node*> erased;  // every node of the chain but the slices, the add last
  std::vector<ir::Node*> slices;  // erased when nothing else reads them
};

// rotate_half(x) = cat([neg(x2), x1], last) from the cat: x, and the neg and the slices.
bool match_rotate_half(const ir::Graph& g, ir::Node* cat, Chain& c) {
  const ir::Arg* tensors = arg(*cat, "tensors");
  if (!tensors || tensors->kind != ir::Arg::Kind::value_list || tensors->values.size() != 2)
    return false;
  ir::Value* n = tensors->values[0];
  ir::Value* x1 = tensors->values[1];
  ir::Node* neg = n->producer();
  if (!is_op(neg, "aten::neg") || !sole_use(g, n)) return false;
  ir::Value* x2 = value_arg(*neg, "self");
  ir::Node* s2 = x2 ? x2->producer() : nullptr;
  ir::Node* s1 = x1->producer();
  ir::Value* x = s2 ? value_arg(*s2, "self") : nullptr;
  if (!x || x->type().shape.empty() || !is_last_dim(int_arg(*cat, "dim"), x->type().shape.size()))
    return false;
  const int64_t d = x->type().shape.back(), h = d / 2;
  if (d % 2 != 0 || d == 0) return false;
  const auto lo = last_dim_slice(s1, x), hi = last_dim_slice(s2, x);
  if (!lo || !hi || *lo != std::pair<int64_t, int64_t>{0, h} ||
      *hi != std::pair<int64_t, int64_t>{h, d})
    return false;
  c.x = x;
  c.erased = {neg, cat};
  c.slices = {s1, s2};
  return true;
}

// From the cat: the products and the sum around rotate_half(x).
bool match(const ir::Graph& g, ir::Node* cat, Chain& c) {
  if (!match_rotate_half(g, cat, c)) return false;
  ir::Value* r = cat->output();
  ir::Node* mul_sin = sole_use(g, r);
  c.sin = other_factor(mul_sin, r);
  if (!c.sin || c.sin == r) return false;
  ir::Value* b = mul_sin->output();
  ir::Node* add = sole_use(g, b);
  if (!is_op(add, "aten::add.Tensor") || !literal_is(arg(*add, "alpha"), 1)) return false;
  ir::Value* lhs = value_arg(*add, "self");
  ir::Value* rhs = value_arg(*add, "other");
  ir::Value* a = lhs == b ? rhs : rhs == b ? lhs : nullptr;
  if (!a || a == b || !sole_use(g, a)) return false;
  ir::Node* mul_cos = a->producer();
  c.cos = other_factor(mul_cos, c.x);
  if (!c.cos || c.cos == c.x) return false;
  const ir::TensorType& t = c.x->type();
  for (const ir::Value* v : {c.cos, c.sin, add->output()}) {
    if (v->type().dtype != t.dtype) return false;
  }
  if (!is_floating(t.dtype) || add->output()->type().shape != t.shape ||
      !broadcasts_to(c.cos->type().shape, t.shape) || !broadcasts_to(c.sin->type().shape, t.shape))
    return false;
  c.add = add;
  c.erased = {mul_cos, c.erased[0], c.erased[1], mul_sin, add};
  return true;
}

void rewrite(ir::Graph& g, const Chain& c) {
  ir::Value* result = c.add->output();
  const std::string name = result->name();
  ir::Node* rotary = g.add_op("fused::rotary_embedding",
                              {ir::Arg::of(c.x), ir::Arg::of(c.cos), ir::Arg::of(c.sin)}, {}, "",
                              c.add);
  rotary->set_loc(c.add->loc());
  g.replace_uses(result, rotary->output());
  for (auto it = c.erased.rbegin(); it != c.erased.rend(); ++it) g.erase(*it);
  for (ir::Node* s : c.slices) {
    if (s->output()->uses().empty() && !is_output(g, s->output())) g.erase(s);
  }
  g.rename(rotary->output(), name);
}

}  // namespace

void raise_rotary(ir::Graph& graph) {
  std::vector<ir::Node*> candidates;
  for (ir::Node* n : graph.nodes()) {
    if (is_op(n, "aten::cat")) candidates.push_back(n);
  }
  for (ir::Node* cat : candidates) {
    Chain c;
    if (match(graph, cat, c)) rewrite(graph, c);
  }
}

}  // namespace symmflow::passes
