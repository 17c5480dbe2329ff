// decompose_collective_matmul: the collectives of sequence parallelism and the matmuls beside
// them become the collective matmuls (Note [collective matmuls] in
// src/ops/symm_mem/collective_matmul.cpp), which hide the communication behind the GEMMs.
//
// All-gather + matmuls, as DTensor gathers the sequence dim d of [B, S/W, H] (d = 0: no split):
//     g = symm_mem::_low_contention_all_gather(x, grp)            ([W*B, S/W, H])
//     p_0, ..., p_{W-1} = aten::split_with_sizes(g, [B]*W)          (dim 0, equal pieces)
//     c = aten::cat([p_0, ..., p_{W-1}], d)                          ([B, S, H])
//     v = aten::reshape(c, ...) ...                                  (views of c's rows)
//     m_i = aten::mm(v_i, w_i)      v_i a reshape of c to [rows, H], w_i [H, N_i]
// becomes  c, o_0, ... = symm_mem::fused_all_gather_matmul(x, [w_0, ...], d, grp)
//          m_i = aten::reshape(o_i, [rows, N_i])
// c keeps its other uses (the backward's weight gradient reads it). The view chains that make
// the w_i (permute of a weight) move before the new node when they come after the gather.
//
// Matmul + reduce-scatter, the row-parallel layer's end under sequence parallelism:
//     m = aten::mm(a, w)                                             ([B*S, N])
//     v = aten::reshape(m, [B, S, N]) ...
//     p_0, ..., p_{W-1} = aten::split_with_sizes(v, [S/W]*W, d)      (d = 0: neither split nor cat)
//     c = aten::cat([p_0, ..., p_{W-1}])
//     r = symm_mem::_low_contention_reduce_scatter(c, op, grp)      (op sum or avg)
// becomes  A = aten::reshape(a, [B, S, K])
//          partials = aten::empty.memory_format([W, B, S/W, N], dtype=...)
//          r, partials_1 = functional<symm_mem::fused_matmul_reduce_scatter>(partials, A, w, op,
//                                                                        d, grp)
//
// Note [when to decompose]: split into a GEMM per rank's chunk, the matmuls cost more launches
// and smaller GEMMs; that pays only once the hidden communication is worth more. Measured on
// 4 x H200 (tools/device/sp_matmul.sh, SIZES="t64 t256 t1024 t4096"; the SP block of
// sp_block.py, hidden 4096, bf16, the CUDA graph's replay in µs, decomposed / not):
//   tokens           64            256           1024          4096
//   A (gathered)     0.5 MiB       2 MiB         8 MiB         32 MiB
//   2 ranks          97.6 / 70.9   112.4 / 97.6  180.3 / 240.1 479.9 / 822.3
//   4 ranks          144.6 / 79.1  161.9 / 116.9 205.2 / 246.2 409.4 / 759.1
// so a chain decomposes when the gathered A (all-gather) or the product (reduce-scatter) has at
// least tunables().collective_matmul_min_bytes, 4 MiB by default: between the sizes measured
// slower and faster. On cpu they cost about what the chains did (the same GEMM and copies: 2
// thread ranks, one OpenBLAS thread, a [2, 128, 256] f32 block: 0.72-0.80 ms against 0.74-0.75;
// with OpenBLAS's own threads both rank threads' GEMMs contend, and more so when they start
// together after the op's barrier: 3-6 ms against 1.1-1.2).
//
// Expects: a verified, functionalized graph whose groups have sizes (after fuse_allreduce_rmsnorm;
//   realize_symm_mem places A_shard and partials).
// Guarantees: the same values (the ops' contracts are the compositions, Note [collective
//   matmuls]); the erased nodes are exactly the matched ones. Nothing happens when a condition
//   fails: a value of the chain used elsewhere or returned (c excepted), pieces not equal or not
//   in order, a cat along the last dim, no mm reading the gathered rows, non-float dtypes,
//   operands defined after the collective by anything but views, below the size of Note [when to
//   decompose].
// Refuses: nothing.
#include <algorithm>
#include <string>
#include <vector>

#include "passes/node_match.hpp"
#include "symmflow/ops/registry.hpp"
#include "symmflow/passes/passes.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::passes {

namespace {

using node_match::arg;
using node_match::is_op;

bool returned(const ir::Graph& g, const ir::Value* v) {
  return std::find(g.outputs().begin(), g.outputs().end(), v) != g.outputs().end();
}

// The only use of v, or null (several uses, or returned).
ir::Node* only_use(const ir::Graph& g, const ir::Value* v) {
  return v->uses().size() == 1 && !returned(g, v) ? v->uses()[0] : nullptr;
}

bool is_float(const ir::Value* v) { return is_floating(v->type().dtype); }

// The cat re-joining, along `cat_dim`, the `parts` equal pieces of `whole` split along `split_dim`
// (the gather: split 0, cat d; the reduce-scatter: split d, cat 0), or null.
ir::Node* split_then_cat(const ir::Graph& g, ir::Value* whole, int parts, int64_t split_dim,
                         int64_t cat_dim, ir::Node** split_out) {
  ir::Node* split = only_use(g, whole);
  if (!is_op(split, "aten::split_with_sizes") || arg(*split, "self")->value != whole)
    return nullptr;
  const ir::Arg* sizes = arg(*split, "split_sizes");
  const ir::Arg* dim = arg(*split, "dim");
  const int64_t rank = int64_t(whole->type().shape.size());
  if (!sizes || sizes->kind != ir::Arg::Kind::literal || !dim->literal.is_number()) return nullptr;
  int64_t d = dim->literal.to_int();
  if (d < 0) d += rank;
  const std::vector<int64_t>& s = sizes->literal.to_int_list();
  if (d != split_dim || int64_t(s.size()) != parts ||
      std::any_of(s.begin(), s.end(), [&](int64_t x) { return x != s[0]; }))
    return nullptr;
  ir::Node* cat = nullptr;
  for (size_t i = 0; i < split->outputs().size(); ++i) {
    ir::Node* use = only_use(g, split->output(i));
    if (!is_op(use, "aten::cat") || (cat && use != cat)) return nullptr;
    cat = use;
  }
  const ir::Arg* list = arg(*cat, "tensors");
  if (list->kind != ir::Arg::Kind::value_list || list->values != split->outputs()) return nullptr;
  int64_t cd = arg(*cat, "dim")->literal.to_int();
  if (cd < 0) cd += rank;
  if (cd != cat_dim) return nullptr;
  *split_out = split;
  return cat;
}

// Moves the producers of `v` that sit at or after `at` (views only, whose own inputs come before
// `at` or are moved too) to just before `at`; false (nothing moved) when one is not a view.
bool hoist_before(ir::Graph& g, ir::Value* v, ir::Node* at, std::vector<ir::Node*>& moved) {
  ir::Node* p = v->producer();
  if (!p || g.position(p) < g.position(at) ||
      std::find(moved.begin(), moved.end(), p) != moved.end())
    return true;
  if (p->kind() != ir::NodeKind::op || !p->op()->has(Tag::view)) return false;
  for (ir::Value* in : p->inputs())
    if (!hoist_before(g, in, at, moved)) return false;
  moved.push_back(p);
  return true;
}

void move_before(ir::Graph& g, const std::vector<ir::Node*>& moved, ir::Node* at) {
  if (moved.empty()) return;
  std::vector<ir::Node*> order;
  for (ir::Node* n : g.nodes()) {
    if (n == at) order.insert(order.end(), moved.begin(), moved.end());
    if (std::find(moved.begin(), moved.end(), n) == moved.end()) order.push_back(n);
  }
  g.reorder(std::move(order));
}

// The mms reading c's rows through reshapes (each [rows, K] @ [K, N]), and those reshapes.
void find_mms(const ir::Graph& g, ir::Value* v, int64_t rows, std::vector<ir::Node*>& mms,
              std::vector<ir::Node*>& reshapes) {
  const Shape& s = v->type().shape;
  for (ir::Node* use : v->uses()) {
    if (is_op(use, "aten::reshape") && arg(*use, "self")->value == v) {
      if (std::find(reshapes.begin(), reshapes.end(), use) != reshapes.end()) continue;
      reshapes.push_back(use);
      find_mms(g, use->output(), rows, mms, reshapes);
    } else if (is_op(use, "aten::mm") && arg(*use, "self")->value == v && s.size() == 2 &&
               s[0] == rows && arg(*use, "mat2")->value != v &&
               std::find(mms.begin(), mms.end(), use) == mms.end()) {
      mms.push_back(use);
    }
  }
}

bool all_gather_matmul(ir::Graph& g, ir::Node* ag) {
  const int w = g.group_size(ag->group());
  ir::Value* x = arg(*ag, "tensor")->value;
  if (w < 2 || !is_float(x) || x->type().shape.size() < 2) return false;
  const int64_t rank = int64_t(x->type().shape.size());
  ir::Value* c = ag->output();
  ir::Node* split = nullptr;
  ir::Node* cat = nullptr;
  int64_t d = 0;
  for (int64_t cd = 1; cd + 1 < rank && !cat; ++cd) {
    cat = split_then_cat(g, c, w, 0, cd, &split);
    d = cat ? cd : 0;
  }
  if (cat) c = cat->output();
  if (int64_t(c->type().bytes()) < tunables().collective_matmul_min_bytes) return false;
  const Shape& cs = c->type().shape;
  const int64_t rows = numel(cs) / cs.back();
  std::vector<ir::Node*> mms, moved, reshapes;
  find_mms(g, c, rows, mms, reshapes);
  std::erase_if(mms, [&](ir::Node* mm) {
    std::vector<ir::Node*> try_moved = moved;
    if (!hoist_before(g, arg(*mm, "mat2")->value, ag, try_moved)) return true;
    moved = try_moved;
    return false;
  });
  if (mms.empty()) return false;
  move_before(g, moved, ag);
  std::vector<ir::Value*> bs;
  for (ir::Node* mm : mms) bs.push_back(arg(*mm, "mat2")->value);
  ir::Node* fused = g.add_op(
      "symm_mem::fused_all_gather_matmul",
      {ir::Arg::of(x), ir::Arg::of_list(bs), ir::Arg::of_literal(d), *arg(*ag, "group_name")}, {},
      "", ag);
  fused->set_loc(ag->loc());
  const std::string c_name = c->name();
  g.replace_uses(c, fused->output(0));
  for (size_t i = 0; i < mms.size(); ++i) {
    ir::Value* m = mms[i]->output();
    const std::string name = m->name();
    ir::Node* flat = g.add_op("aten::reshape",
                              {ir::Arg::of(fused->output(i + 1)),
                               ir::Arg::of_literal(std::vector<int64_t>(m->type().shape))},
                              {}, "", mms[i]);
    g.replace_uses(m, flat->output());
    g.erase(mms[i]);
    g.rename(flat->output(), name);
    g.rename(fused->output(i + 1), g.fresh_name(name + "_nd"));
  }
  // The reshapes that only fed the mms are dead now (a later one of a chain first).
  for (auto it = reshapes.rbegin(); it != reshapes.rend(); ++it) {
    if ((*it)->output()->uses().empty() && !returned(g, (*it)->output())) g.erase(*it);
  }
  if (cat) {
    g.erase(cat);
    g.erase(split);
  }
  g.erase(ag);
  g.rename(fused->output(0), c_name);
  return true;
}

bool matmul_reduce_scatter(ir::Graph& g, ir::Node* rs) {
  const int w = g.group_size(rs->group());
  const ir::Arg* op = arg(*rs, "reduce_op");
  if (w < 2 || !op->literal.is_string() ||
      (op->literal.to_string() != "sum" && op->literal.to_string() != "avg"))
    return false;
  ir::Value* c = arg(*rs, "tensor")->value;
  if (c->uses().size() != 1 || returned(g, c) || !is_float(c)) return false;
  // Walk up: cat of an equal split (along d >= 1), then reshapes, then the mm.
  ir::Node* cat = c->producer();
  ir::Node* split = nullptr;
  ir::Value* v = c;
  int64_t d = 0;
  if (is_op(cat, "aten::cat")) {
    const ir::Arg* list = arg(*cat, "tensors");
    if (list->kind != ir::Arg::Kind::value_list || list->values.empty()) return false;
    split = list->values[0]->producer();
    if (!is_op(split, "aten::split_with_sizes")) return false;
    v = arg(*split, "self")->value;
    const int64_t rank = int64_t(v->type().shape.size());
    for (int64_t sd = 1; sd + 1 < rank && d == 0; ++sd) {
      ir::Node* found = nullptr;
      if (split_then_cat(g, v, w, sd, 0, &found) == cat) d = sd;
    }
    if (d == 0) return false;
  } else {
    cat = nullptr;
  }
  std::vector<ir::Node*> reshapes;
  ir::Value* m = v;
  while (is_op(m->producer(), "aten::reshape")) {
    if (m != v && only_use(g, m) == nullptr) return false;
    reshapes.push_back(m->producer());
    m = arg(*m->producer(), "self")->value;
  }
  ir::Node* mm = m->producer();
  if (!is_op(mm, "aten::mm") || only_use(g, m) == nullptr || (cat && only_use(g, v) != split))
    return false;
  if (v->type().shape.size() < 2 || v->type().shape.back() != m->type().shape.back()) return false;
  if (int64_t(m->type().bytes()) < tunables().collective_matmul_min_bytes) return false;
  ir::Value* a = arg(*mm, "self")->value;
  Shape a_shape = v->type().shape;
  a_shape.back() = a->type().shape.back();
  ir::Node* lhs = g.add_op("aten::reshape",
                           {ir::Arg::of(a), ir::Arg::of_literal(std::vector<int64_t>(a_shape))},
                           {}, g.fresh_name(a->name() + "_nd"), rs);
  Shape slots = rs->output()->type().shape;
  slots.insert(slots.begin(), w);
  ir::Node* empty = g.add_op("aten::empty.memory_format",
                             {ir::Arg::of_literal(std::vector<int64_t>(slots))},
                             {{"dtype", ir::Arg::of_literal(c->type().dtype)}}, "partials", rs);
  const OpDef* def = Registry::global().find("symm_mem::fused_matmul_reduce_scatter");
  SF_CHECK(def, "internal: symm_mem::fused_matmul_reduce_scatter is not registered");
  std::vector<ir::Arg> args = {ir::Arg::of(empty->output()), ir::Arg::of(lhs->output()),
                               *arg(*mm, "mat2"),           *op,
                               ir::Arg::of_literal(d),       *arg(*rs, "group_name")};
  for (ir::Arg& x : args) x.defaulted = false;
  ir::Node* fused = g.add_functional(*def, std::move(args), rs);
  fused->set_loc(rs->loc());
  const std::string r_name = rs->output()->name();
  g.replace_uses(rs->output(), fused->output(0));
  g.erase(rs);
  if (cat) {
    g.erase(cat);
    g.erase(split);
  }
  for (ir::Node* r : reshapes) g.erase(r);
  g.erase(mm);
  g.rename(fused->output(0), r_name);
  return true;
}

}  // namespace

void decompose_collective_matmul(ir::Graph& graph) {
  std::vector<ir::Node*> gathers, scatters;
  for (ir::Node* n : graph.nodes()) {
    if (is_op(n, "symm_mem::_low_contention_all_gather")) gathers.push_back(n);
    if (is_op(n, "symm_mem::_low_contention_reduce_scatter")) scatters.push_back(n);
  }
  for (ir::Node* n : scatters) matmul_reduce_scatter(graph, n);
  for (ir::Node* n : gathers) all_gather_matmul(graph, n);
}

}  // namespace symmflow::passes
