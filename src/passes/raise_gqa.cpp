// raise_gqa: key and value heads repeated for attention (transformers' repeat_kv, torchtitan's
// repeat_kv) are read in place by grouped-query attention instead (Note [attention reads grouped
// heads in place]):
//     u = aten::unsqueeze(kv, 2 or -3)                 kv: [B, H, S, D]
//     e = aten::expand(u, [B, H, R, S, D])
//     c = aten::clone(e)                               (optional; default memory format)
//     r = aten::reshape(c, [B, H * R, S, D])          (or aten::view)
//     o = aten::scaled_dot_product_attention(q, r_k, r_v, ..., enable_gqa=False)
// with both key and value repeated R times and q's heads H * R, becomes
//     o = aten::scaled_dot_product_attention(q, kv_k, kv_v, ..., enable_gqa=True)
//
// Expects: a verified, functionalized graph (before fuse_pointwise, which would otherwise make the
//   expansion's copy a fused region of its own).
// Guarantees: each matched attention reads the unrepeated key and value; the repeats' nodes are
//   erased. The result is the same numbers: query head h reads key/value head h / R either way
//   (enable_gqa's definition), in the same order of operations.
// Refuses: nothing; an attention is left alone when enable_gqa is already set or not a literal,
//   a repeat's value has another use or is a graph output, key and value are repeated by different
//   factors or from different batch, length or head counts, or the shapes are not the repeat's.
#include <optional>
#include <vector>

#include "passes/node_match.hpp"
#include "symmflow/passes/passes.hpp"

namespace symmflow::passes {

// Note [attention reads grouped heads in place]
// Models with fewer key/value heads than query heads repeat each key/value head R times before
// attention whenever they pass a mask (transformers' sdpa path turns enable_gqa on only for mask-
// less calls): an expand and a copy of the whole KV cache, per layer and token. In a decode step
// at batch 8 and 1024 cached tokens (hidden 4096, 32 query and 8 KV heads) that copy writes 64 MiB
// per tensor and took 54 us of a 631 us step on an H200 (docs/benchmarks.md), more than the
// attention itself. Both attention kernels (CPU and CUDA, own and cuDNN's) read head h / R of an
// unrepeated key and value under enable_gqa, so the repeat is dropped: bitwise the same result, no
// copy, and the cache is read where it lies. It is a fusion (SYMMFLOW_SKIP_PASSES=raise_gqa turns
// it off: Note [skipping fusions]).

namespace {

using namespace node_match;  // the shared matchers (node_match.hpp)

struct Repeat {
  ir::Value* source = nullptr;    // kv: [B, H, S, D]
  int64_t factor = 0;             // R
  std::vector<ir::Node*> nodes;   // unsqueeze, expand, (clone), reshape
};

// Whether every use of `v` is `user` and `v` is no graph output.
bool used_only_by(const ir::Graph& g, const ir::Value* v, const ir::Node* user) {
  if (is_output(g, v) || v->uses().empty()) return false;
  for (const ir::Node* u : v->uses())
    if (u != user) return false;
  return true;
}

// The repeat that produced `r`, the attention's key or value, or std::nullopt.
std::optional<Repeat> match_repeat(const ir::Graph& g, ir::Value* r, const ir::Node* attention) {
  Repeat rep;
  ir::Node* reshape = r->producer();
  if (!(is_op(reshape, "aten::reshape") || is_op(reshape, "aten::view")) ||
      !used_only_by(g, r, attention))
    return std::nullopt;
  ir::Value* c = value_arg(*reshape, "self");
  ir::Node* clone = c ? c->producer() : nullptr;
  ir::Value* e = c;
  if (is_op(clone, "aten::clone")) {
    const ir::Arg* format = arg(*clone, "memory_format");
    if (!sole_use(g, c) || (format && !(format->kind == ir::Arg::Kind::literal &&
                                        format->literal.is_none())))
      return std::nullopt;
    e = value_arg(*clone, "self");
  } else {
    clone = nullptr;
  }
  ir::Node* expand = e ? e->producer() : nullptr;
  if (!is_op(expand, "aten::expand") || !sole_use(g, e)) return std::nullopt;
  ir::Value* u = value_arg(*expand, "self");
  ir::Node* unsqueeze = u ? u->producer() : nullptr;
  if (!is_op(unsqueeze, "aten::unsqueeze") || !sole_use(g, u)) return std::nullopt;
  ir::Value* kv = value_arg(*unsqueeze, "self");
  if (!kv || !(literal_is(arg(*unsqueeze, "dim"), 2) || literal_is(arg(*unsqueeze, "dim"), -3)))
    return std::nullopt;
  const auto& in = kv->type().shape;
  const auto& ex = e->type().shape;
  const auto& out = r->type().shape;
  if (in.size() != 4 || ex.size() != 5 || out.size() != 4) return std::nullopt;
  if (ex[0] != in[0] || ex[1] != in[1] || ex[3] != in[2] || ex[4] != in[3] || ex[2] < 1)
    return std::nullopt;
  if (out[0] != in[0] || out[1] != in[1] * ex[2] || out[2] != in[2] || out[3] != in[3])
    return std::nullopt;
  rep.source = kv;
  rep.factor = ex[2];
  rep.nodes = {unsqueeze, expand};
  if (clone) rep.nodes.push_back(clone);
  rep.nodes.push_back(reshape);
  return rep;
}

bool raise_one(ir::Graph& g, ir::Node* attention) {
  const int gqa = attention->op()->schema().arg_index("enable_gqa");
  const int ki = attention->op()->schema().arg_index("key");
  const int vi = attention->op()->schema().arg_index("value");
  if (gqa < 0 || ki < 0 || vi < 0) return false;
  const ir::Arg& flag = attention->args()[size_t(gqa)];
  if (flag.kind != ir::Arg::Kind::literal || !flag.literal.is_bool() || flag.literal.to_bool())
    return false;
  ir::Value* k = value_arg(*attention, "key");
  ir::Value* v = value_arg(*attention, "value");
  ir::Value* q = value_arg(*attention, "query");
  if (!k || !v || !q || k == v) return false;
  std::optional<Repeat> rk = match_repeat(g, k, attention);
  std::optional<Repeat> rv = match_repeat(g, v, attention);
  if (!rk || !rv || rk->factor != rv->factor) return false;
  const auto& ks = rk->source->type().shape;
  const auto& vs = rv->source->type().shape;
  const auto& qs = q->type().shape;
  if (ks[0] != vs[0] || ks[1] != vs[1] || ks[2] != vs[2] || qs.size() != 4 ||
      qs[1] != ks[1] * rk->factor)
    return false;
  attention->set_arg(size_t(ki), ir::Arg::of(rk->source));
  attention->set_arg(size_t(vi), ir::Arg::of(rv->source));
  attention->set_arg(size_t(gqa), ir::Arg::of_literal(symmflow::Value(true)));
  for (const Repeat* r : {&*rk, &*rv}) {
    for (auto it = r->nodes.rbegin(); it != r->nodes.rend(); ++it) g.erase(*it);
  }
  return true;
}

}  // namespace

void raise_gqa(ir::Graph& graph) {
  for (ir::Node* attention : calls_of(graph, "aten::scaled_dot_product_attention"))
    raise_one(graph, attention);
}

}  // namespace symmflow::passes
