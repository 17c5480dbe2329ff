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
// And its backward as AOT autograd traces it (Note [rotary backward]):
//     y  = aten::mul.Tensor(g, sin)                   (either order)
//     y1 = aten::slice.Tensor(y, last, 0, h)
//     y2 = aten::slice.Tensor(y, last, h, end >= D)
//     n  = aten::neg(y1)
//     s1 = aten::slice_scatter(z, n, last, h, end >= D)   z = aten::full(shape of g, 0)
//     s2 = aten::slice_scatter(z, y2, last, 0, h)
//     t  = aten::add.Tensor(s1, s2)                   (either order, alpha 1)
//     c  = aten::mul.Tensor(g, cos)                   (either order)
//     o  = aten::add.Tensor(t, c)                     (either order, alpha 1)
// becomes  sin' = aten::neg(aten::cat([sin[..., h:], sin[..., :h]], -1))
//          o = fused::rotary_embedding(g, cos, sin')
//
// Expects: a verified, functionalized graph (before fuse_pointwise, which would otherwise fuse the
//   products and the sum into a region of their own around the slices and the cat).
// Guarantees: each matched chain is replaced by one node whose output takes over every use of the
//   add's value; the chain's nodes are erased (a slice with another use stays). The result is
//   bitwise the chain's (the op's definition: Note [fused compute ops]).
// Refuses: nothing; a chain is left alone when a value in it (other than the slices, and z) has
//   another use or is a graph output, x's last dim is odd, the slices are not x's halves along its
//   last dim, x, cos, sin and the result do not share one floating dtype, or cos or sin does not
//   broadcast to x's shape (the products would be larger than x); a backward chain also when z
//   is not a fill of zeros of g's shape and dtype, or sin's last dim is not g's.
#include <algorithm>
#include <map>
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

// Note [rotary backward]
// The gradient of o = x * cos + rotate_half(x) * sin is g * cos + rotate_half^T(g * sin), where
// rotate_half^T(y) = cat(y[h:], -y[:h]); AOT autograd writes the transpose as two slice_scatters
// into zeros and their sum. Per half, with s1, s2 = sin[:h], sin[h:]:
//     dx[:h] = g[:h] * cos[:h] + g[h:] * s2,   dx[h:] = g[h:] * cos[h:] - g[:h] * s1,
// which is fused::rotary_embedding(g, cos, sin') with sin' = -cat(s2, s1): the op computes
// x[:h] * cos[:h] - x[h:] * sin'[:h] and x[h:] * cos[h:] + x[:h] * sin'[h:]. Each product is the
// chain's own, up to signs (negation is exact), and each sum adds the same two numbers, so the
// result is the chain's bit for bit (a zero's sign aside: the chain adds the scatters' +0).
// sin' is computed from sin (a [S, D] or [B, 1, S, D] table, the heads' count smaller than g)
// by one slice pair, cat and neg. The chain was eleven kernels, two of which copied the whole
// zero tensor (the device-to-device copies of a GPU training step's backward: docs/benchmarks.md);
// it is one. The fill of zeros is a node, not a constant, because the folding pass makes uniform
// values fills (Note [uniform constants are fills] in python/symmflow/torch/_fold.py).

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


// A fill of zeros (aten::full(shape, 0) or aten::zeros(shape)) of `like`'s shape and dtype.
bool is_zeros_like(const ir::Value* z, const ir::Value* like) {
  const ir::Node* p = z->producer();
  const bool zero = is_op(p, "aten::zeros") ||
                    (is_op(p, "aten::full") && literal_is(arg(*p, "fill_value"), 0));
  return zero && z->type().shape == like->type().shape && z->type().dtype == like->type().dtype;
}

// A slice_scatter of `src` into zeros like `like` along the last dim, [start, end >= D) when
// end_open, else [start, end).
bool scatter_into_zeros(const ir::Node* n, const ir::Value* src, const ir::Value* like,
                        int64_t start, int64_t end) {
  if (!is_op(n, "aten::slice_scatter") || value_arg(*n, "src") != src) return false;
  const ir::Value* z = value_arg(*n, "self");
  const size_t rank = like->type().shape.size();
  const int64_t d = like->type().shape.back();
  const ir::Arg* step = arg(*n, "step");
  if (!z || !is_zeros_like(z, like) || !is_last_dim(int_arg(*n, "dim"), rank) ||
      (step && !literal_is(step, 1)))
    return false;
  std::optional<int64_t> s = int_arg(*n, "start"), e = int_arg(*n, "end");
  const ir::Arg* end_arg = arg(*n, "end");
  const bool open = end_arg && end_arg->kind == ir::Arg::Kind::literal && end_arg->literal.is_none();
  return s && *s == start && (open ? end >= d : e && std::min(*e, d) == std::min(end, d));
}

struct BackwardChain {
  ir::Value* g = nullptr;
  ir::Value* cos = nullptr;
  ir::Value* sin = nullptr;
  ir::Node* out = nullptr;
  std::vector<ir::Node*> erased;  // in graph order, the final add last
};

// From the neg of the first half of y = g * sin: the whole backward chain.
bool match_backward(const ir::Graph& g, ir::Node* neg, BackwardChain& c) {
  ir::Value* y1 = value_arg(*neg, "self");
  ir::Node* lo = y1 ? y1->producer() : nullptr;
  ir::Value* y = lo && is_op(lo, "aten::slice.Tensor") ? value_arg(*lo, "self") : nullptr;
  if (!y || y->type().shape.empty() || !sole_use(g, y1) || !sole_use(g, neg->output()))
    return false;
  const int64_t d = y->type().shape.back(), h = d / 2;
  if (d == 0 || d % 2 != 0 || y->uses().size() != 2 || is_output(g, y)) return false;
  ir::Node* hi = y->uses()[0] == lo ? y->uses()[1] : y->uses()[0];
  const auto lo_range = last_dim_slice(lo, y), hi_range = last_dim_slice(hi, y);
  if (!lo_range || !hi_range || *lo_range != std::pair<int64_t, int64_t>{0, h} ||
      *hi_range != std::pair<int64_t, int64_t>{h, d})
    return false;
  ir::Value* y2 = hi->output();
  ir::Node* s1 = sole_use(g, neg->output());
  ir::Node* s2 = sole_use(g, y2);
  if (!scatter_into_zeros(s1, neg->output(), y, h, d) || !scatter_into_zeros(s2, y2, y, 0, h))
    return false;
  ir::Node* t = sole_use(g, s1->output());
  if (!is_op(t, "aten::add.Tensor") || sole_use(g, s2->output()) != t ||
      !literal_is(arg(*t, "alpha"), 1))
    return false;
  ir::Node* mul_sin = y->producer();
  if (!is_op(mul_sin, "aten::mul.Tensor")) return false;
  ir::Node* out = sole_use(g, t->output());
  if (!is_op(out, "aten::add.Tensor") || !literal_is(arg(*out, "alpha"), 1)) return false;
  ir::Value* lhs = value_arg(*out, "self");
  ir::Value* rhs = value_arg(*out, "other");
  ir::Value* a = lhs == t->output() ? rhs : rhs == t->output() ? lhs : nullptr;
  if (!a || a == t->output() || !sole_use(g, a)) return false;
  ir::Node* mul_cos = a->producer();
  // g is the factor both products share; sin and cos the others.
  for (ir::Value* cand : {value_arg(*mul_sin, "self"), value_arg(*mul_sin, "other")}) {
    ir::Value* cos = other_factor(mul_cos, cand);
    if (cand && cos && cos != cand) {
      c.g = cand;
      c.cos = cos;
      c.sin = other_factor(mul_sin, cand);
      break;
    }
  }
  if (!c.g || !c.sin || c.sin == c.g) return false;
  const ir::TensorType& t_g = c.g->type();
  for (const ir::Value* v : {c.cos, c.sin, y, out->output()}) {
    if (v->type().dtype != t_g.dtype) return false;
  }
  if (!is_floating(t_g.dtype) || y->type().shape != t_g.shape ||
      out->output()->type().shape != t_g.shape || c.sin->type().shape.empty() ||
      c.sin->type().shape.back() != d || !broadcasts_to(c.cos->type().shape, t_g.shape) ||
      !broadcasts_to(c.sin->type().shape, t_g.shape))
    return false;
  c.out = out;
  c.erased = {mul_sin, lo, hi, neg, s1, s2, t, mul_cos, out};
  return true;
}

// Note [one swapped sin]: every layer's q and k read the same sin, so the chains of one backward
// share one -cat(sin[h:], sin[:h]) (`made`: per sin, the one made first, which precedes the later
// chains; the pass visits them in program order) instead of a cat and a neg per chain: Llama's
// two-layer backward made four of each.
void rewrite_backward(ir::Graph& g, const BackwardChain& c,
                      std::map<const ir::Value*, ir::Value*>& made) {
  ir::Value* result = c.out->output();
  const std::string name = result->name();
  const int64_t d = c.sin->type().shape.back(), h = d / 2;
  ir::Value*& swapped_sin = made[c.sin];
  if (swapped_sin && g.position(swapped_sin->producer()) > g.position(c.out)) swapped_sin = nullptr;
  auto slice = [&](int64_t start, int64_t end) {
    return g.add_op("aten::slice.Tensor",
                    {ir::Arg::of(c.sin), ir::Arg::of_literal(symmflow::Value(int64_t(-1))),
                     ir::Arg::of_literal(symmflow::Value(start)),
                     ir::Arg::of_literal(symmflow::Value(end))},
                    {}, "", c.out)->output();
  };
  if (!swapped_sin) {
    ir::Value* upper = slice(h, d);
    ir::Value* lower = slice(0, h);
    ir::Node* swapped = g.add_op("aten::cat",
                                 {ir::Arg::of_list({upper, lower}),
                                  ir::Arg::of_literal(symmflow::Value(int64_t(-1)))},
                                 {}, "", c.out);
    ir::Node* sin = g.add_op("aten::neg", {ir::Arg::of(swapped->output())}, {}, "", c.out);
    for (ir::Node* n : {upper->producer(), lower->producer(), swapped, sin})
      n->set_loc(c.out->loc());
    swapped_sin = sin->output();
  }
  ir::Node* rotary = g.add_op("fused::rotary_embedding",
                              {ir::Arg::of(c.g), ir::Arg::of(c.cos), ir::Arg::of(swapped_sin)},
                              {}, "", c.out);
  rotary->set_loc(c.out->loc());
  g.replace_uses(result, rotary->output());
  std::vector<ir::Value*> zeros;
  for (ir::Node* n : c.erased) {
    ir::Value* z = is_op(n, "aten::slice_scatter") ? value_arg(*n, "self") : nullptr;
    if (z && std::find(zeros.begin(), zeros.end(), z) == zeros.end()) zeros.push_back(z);
  }
  for (auto it = c.erased.rbegin(); it != c.erased.rend(); ++it) g.erase(*it);
  for (ir::Value* z : zeros) {  // the fill, once nothing else reads it
    if (z->producer() && z->uses().empty() && !is_output(g, z)) g.erase(z->producer());
  }
  g.rename(rotary->output(), name);
}

}  // namespace

void raise_rotary(ir::Graph& graph) {
  for (ir::Node* cat : calls_of(graph, "aten::cat")) {
    Chain c;
    if (match(graph, cat, c)) rewrite(graph, c);
  }
  std::map<const ir::Value*, ir::Value*> swapped_sins;  // Note [one swapped sin]
  for (ir::Node* neg : calls_of(graph, "aten::neg")) {
    BackwardChain c;
    if (match_backward(graph, neg, c)) rewrite_backward(graph, c, swapped_sins);
  }
}

}  // namespace symmflow::passes
