// fuse_pointwise: regions of elementwise aten ops become one `fused` node.
//
// Expects: a functionalized graph (no op node writes an argument). Other node kinds are opaque.
// Guarantees:
//   - a fusible node is an op node whose op is_fusible_pointwise (tagged pointwise, neither
//     in_place nor out: Note [op tags]; add/sub/mul/div .Tensor and .Scalar, sin, cos, exp, tanh,
//     relu, gelu, silu, sigmoid, neg, rsqrt, reciprocal, pow.Tensor_Scalar, rsub.Scalar and
//     _to_copy among the built-in ops) with one floating-point output, whose every tensor
//     argument broadcasts to the output's shape (PyTorch's rules: trailing-aligned, each dim
//     equal or 1 or missing) and has the output's dtype, except that a node with a single tensor
//     argument may convert between f32, bf16 and f16; its Device,
//     Layout and MemoryFormat arguments (by schema type) must be None, and a ScalarType argument
//     needs an f32, bf16 or f16 result (Note [fused casts and broadcasts]).
//   - a fusible producer P joins a region when every use of its value is a fusible node of that
//     one region with P's output's shape (its dtype may differ), and the value is neither a graph
//     output nor a writeback value (Note [regions with shared values]). Regions therefore have a
//     single output (their root, the last node) and are maximal under that rule; a value with a
//     user outside its region is never fused across (it stays a buffer), while one used several
//     times inside a region (torch's silu: x * sigmoid(x)) is a register like any other. Every
//     value defined in a region has the root's shape; only external inputs broadcast.
//   - every region of >= 2 ops becomes one `fused` node at its root's position, whose body holds
//     the ops in their original order over body inputs named after the region's external inputs
//     (as the text format names them); its output keeps the root's name and layout. Single ops
//     are left alone. Only the region's output is a buffer.
//   - a region input may be a strided view (a permute, an expand): the fused executors index it
//     by its strides, as they index a broadcast input, so no copy is added.
//   - a region has at most 12 ops and 8 external inputs (Note [fused region size]).
//   - O(n log n): one walk back with union-find, one reorder, erasures from the back.
// Refuses: nothing (non-fusible nodes are left as they are).
//
// Note [regions with shared values]: a region was a tree (a producer joined only a consumer that
// was its value's every use). Decompositions share values inside a chain: torch's silu in f32 is
// u = _to_copy(x); u * sigmoid(u), so u, used twice, stayed a buffer, and the SwiGLU tail took
// two steps. A producer now joins when all its uses are in one region, so the region is a DAG
// with one output; its members are still contiguous in effect (no use leaves the region, so
// moving them to the root's position breaks no order). Deciding from the back sees every user's
// region before its producers; regions only grow by producers, never merge, so a region's root
// stays its last node. The executors already run DAG bodies: the CPU one frees scratch after a
// value's last use, the GPU one releases a register after its last reader.
//
// Note [fused casts and broadcasts]: the pointwise work of a decoder layer is mostly chains that
// change dtype (torch's silu in f32 between bf16 GEMMs: _to_copy, silu, _to_copy, mul) or read a
// tensor broadcast over heads (rotary's x * cos + rotate_half(x) * sin, cos [tokens, head_dim]).
// Both fuse, under rules that keep every executor simple and bitwise equal to op-by-op execution:
//   - dtypes: each body value keeps its own dtype and every executor rounds each op's result to
//     it (the CPU runs the very registry kernels per chunk; the GPU program rounds each register,
//     ProgramBuilder::value). A dtype change happens only in an op with one tensor argument (a
//     conversion such as _to_copy), so no fused op promotes two operands of different dtypes, and
//     only between f32, bf16 and f16: a GPU program computes in one type (Note [pointwise
//     programs]), float unless an f64 value takes part, and a bf16 silu or an alpha product
//     computed in double may round differently from op-by-op execution, which computes it in
//     float. So a cast to or from f64 (or an integer type) stays a node of its own; a region is
//     all f64 or holds none.
//   - shapes: every value defined in the region has the region's (root's) shape; only an external
//     input may be smaller and broadcast. The CPU executor gathers such an input chunk by chunk
//     through stride-0 indexing into a chunk-sized buffer (exec/fused.cpp); the GPU loads it
//     with stride 0 on its broadcast dims (a program over the region's shape, run by the generic
//     pointwise kernel: exec/cuda/fused.cpp). Intermediates are never broadcast, so scratch stays
//     one chunk per value. A strided view among the inputs (rotary's q is a permute of a GEMM's
//     result) is read the same way, by its strides, instead of through a copy made before the
//     region: the region then costs one pass over memory, not two.
//   - which op converts is the registry's word: the op is tagged pointwise and its result's dtype
//     differs from its one tensor argument's; arguments of type Device, Layout or MemoryFormat
//     must be None so the op is a dtype change and nothing else, and an op taking a ScalarType
//     fuses only with an f32, bf16 or f16 result. No op names here.
#include <algorithm>
#include <numeric>
#include <set>
#include <span>
#include <string>
#include <unordered_map>

#include "symmflow/passes/passes.hpp"

namespace symmflow::passes {

bool is_fusible_pointwise(const OpDef& op) {
  return op.has(Tag::pointwise) && !op.has(Tag::in_place) && !op.has(Tag::out);
}

namespace {

using ir::Arg;
using ir::Graph;
using ir::Node;
using ir::NodeKind;

// The dtypes a cast may join inside a region: those GPU programs compute in float (f64 computes
// in double; Note [fused casts and broadcasts]).
bool computed_in_float(DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16; }

// Note [fused casts and broadcasts]: argument types and literals a fusible node may have.
bool fusible_node(const Node* n) {
  if (n->kind() != NodeKind::op || !is_fusible_pointwise(*n->op()) || n->outputs().size() != 1)
    return false;
  const ir::TensorType& t = n->output()->type();
  // Integer and bool results stay nodes: the GPU's programs compute floats only (Note [integer
  // pointwise on GPUs] in kernels/cuda/pointwise/program.hpp), and mask or position arithmetic
  // is small beside the float chains.
  if (!is_floating(t.dtype)) return false;
  const FunctionSchema& schema = n->op()->schema();
  size_t tensors = 0;
  bool converts = false;
  for (size_t k = 0; k < n->args().size(); ++k) {
    const Arg& a = n->args()[k];
    if (a.kind == Arg::Kind::value_list || a.kind == Arg::Kind::rank_relative) return false;
    if (a.kind == Arg::Kind::value) {
      ++tensors;
      const ir::TensorType& at = a.value->type();
      if (!broadcasts_to(at.shape, t.shape)) return false;
      if (at.dtype != t.dtype) {
        if (!computed_in_float(at.dtype) || !computed_in_float(t.dtype)) return false;
        converts = true;
      }
      continue;
    }
    const TypeKind kind = k < schema.args.size() ? schema.args[k].type.kind : TypeKind::Tensor;
    const bool placement = kind == TypeKind::Device || kind == TypeKind::Layout ||
                           kind == TypeKind::MemoryFormat;
    if (placement && a.kind == Arg::Kind::literal && !a.literal.is_none()) return false;
    // An op that takes a dtype converts: only to f32, bf16 or f16 (an i64 copy stays a node).
    if (kind == TypeKind::ScalarType && !computed_in_float(t.dtype)) return false;
  }
  return !converts || tensors == 1;
}

// Note [fused region size]: a region grows by producers only while it has at most kMaxFusedOps
// ops and kMaxFusedInputs external tensors, so that every executor runs it as one program: the
// GPU's (kernels/cuda/pointwise/pointwise.hpp) holds 10 tensors (the inputs and the one output), 48
// instructions (a load per input, at most 3 per op: the op and the constants of two scalar
// arguments, a store) and 24 live registers (inputs and intermediates). Without the bound a long
// decomposed chain (a backward graph's, say) would fuse into a region the GPU refuses at run
// time. A region at the bound stays a buffer boundary; its producers form regions of their own.
constexpr size_t kMaxFusedOps = 12;
constexpr size_t kMaxFusedInputs = 8;

struct UnionFind {
  std::vector<size_t> parent;
  explicit UnionFind(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  size_t find(size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
};

// The regions of fusible nodes: a producer joins the one region of all its users; since users
// come later, a region's root (its representative) is its last node.
struct Regions {
  std::vector<bool> fusible;  // per node
  UnionFind uf;
  std::vector<size_t> first, member;  // members of root r, in order: member[first[r], first[r + 1])

  size_t root(size_t i) { return uf.find(i); }
  std::span<const size_t> of(size_t root) const {
    return {member.data() + first[root], first[root + 1] - first[root]};
  }
};

Regions find_regions(const Graph& graph, const std::vector<Node*>& nodes) {
  std::unordered_map<const ir::Value*, int> pinned;  // graph outputs and writeback values
  for (const ir::Value* v : graph.outputs()) pinned[v] = 1;
  for (const Graph::Writeback& w : graph.writebacks()) pinned[w.value] = 1;
  Regions r{std::vector<bool>(nodes.size()), UnionFind(nodes.size()), {}, {}};
  UnionFind& uf = r.uf;
  std::vector<bool>& fusible = r.fusible;
  for (size_t i = 0; i < nodes.size(); ++i) fusible[i] = fusible_node(nodes[i]);
  // Per region root: its ops and its external inputs (Note [fused region size]).
  std::vector<size_t> ops(nodes.size(), 1);
  std::vector<std::set<const ir::Value*>> external(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!fusible[i]) continue;
    for (const ir::Value* in : nodes[i]->inputs()) external[i].insert(in);
  }
  // From the last node back (Note [regions with shared values]): a producer joins when every use
  // of its value is a fusible node of one region with the value's shape. Its users were placed
  // already, and a region's root, its last node, is the set's representative.
  for (size_t i = nodes.size(); i-- > 0;) {
    const ir::Value* v = fusible[i] ? nodes[i]->output() : nullptr;
    if (!v || pinned.count(v) || v->uses().empty()) continue;
    size_t region = nodes.size();  // none yet
    bool joins = true;
    for (const Node* u : v->uses()) {
      const size_t at = &u->owner() == &graph ? graph.position(u) : nodes.size();
      if (at == nodes.size() || !fusible[at] || u->output()->type().shape != v->type().shape) {
        joins = false;  // a broadcast into a bigger value stays external, as any other use
        break;
      }
      const size_t root = uf.find(at);
      if (region != nodes.size() && root != region) {
        joins = false;
        break;
      }
      region = root;
    }
    if (!joins || ops[region] + 1 > kMaxFusedOps) continue;
    std::set<const ir::Value*> grown = external[region];
    grown.erase(v);
    grown.insert(external[i].begin(), external[i].end());
    if (grown.size() > kMaxFusedInputs) continue;
    uf.parent[i] = region;  // i is still alone: only its users were placed
    ++ops[region];
    external[region] = std::move(grown);
  }
  r.first.assign(nodes.size() + 1, 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (fusible[i]) ++r.first[uf.find(i) + 1];
  }
  std::partial_sum(r.first.begin(), r.first.end(), r.first.begin());
  r.member.resize(r.first.back());
  std::vector<size_t> fill(r.first.begin(), r.first.end() - 1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (fusible[i]) r.member[fill[uf.find(i)]++] = i;
  }
  return r;
}

// The fused node of one region (rooted at `root_node`). `final_name`: the names earlier fused
// outputs take at the end.
Node* fuse_region(Graph& graph, const std::vector<Node*>& nodes, std::span<const size_t> region,
                  Node* root_node,
                  const std::unordered_map<const ir::Value*, std::string>& final_name) {
  // External inputs, in order of first use; everything else is defined inside.
  std::unordered_map<const ir::Value*, bool> inside;
  for (size_t m : region) inside[nodes[m]->output()] = true;
  std::vector<ir::Value*> inputs;
  std::unordered_map<const ir::Value*, bool> seen;
  for (size_t m : region) {
    for (ir::Value* v : nodes[m]->inputs()) {
      if (!inside.count(v) && !seen[v]) {
        seen[v] = true;
        inputs.push_back(v);
      }
    }
  }
  auto body = std::make_unique<Graph>("fused", graph.world_size());
  std::unordered_map<const ir::Value*, ir::Value*> inner;
  for (size_t k = 0; k < inputs.size(); ++k) {
    ir::Value* v = inputs[k];
    auto pending = final_name.find(v);  // an earlier fused node's output, renamed at the end
    inner[v] = body->add_input(pending == final_name.end() ? v->name() : pending->second, v->type());
  }
  for (size_t m : region) {
    const Node* src = nodes[m];
    const FunctionSchema& s = src->op()->schema();
    std::vector<ir::KwArg> kwargs;
    for (size_t k = 0; k < src->args().size(); ++k) {
      Arg a = src->args()[k];
      if (a.defaulted) continue;
      if (a.kind == Arg::Kind::value) a.value = inner.at(a.value);
      kwargs.emplace_back(s.args[k].name, std::move(a));
    }
    Node* copy = body->add_op(*src->op(), {}, kwargs, src->output()->name());
    copy->set_loc(src->loc());
    inner[src->output()] = copy->output();
  }
  body->set_outputs({inner.at(root_node->output())});
  Node* fused = graph.add_fused(inputs, std::move(body));
  fused->set_loc(root_node->loc());
  fused->output()->set_layout(root_node->output()->layout());
  return fused;
}

}  // namespace

void fuse_pointwise(ir::Graph& graph) {
  const std::vector<Node*> nodes = graph.nodes();
  Regions regions = find_regions(graph, nodes);
  std::vector<Node*> order, dead;
  order.reserve(nodes.size());
  std::vector<std::pair<ir::Value*, std::string>> renames;
  std::unordered_map<const ir::Value*, std::string> final_name;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node* n = nodes[i];
    if (!regions.fusible[i]) {
      order.push_back(n);
      continue;
    }
    size_t root = regions.root(i);
    const std::span<const size_t> region = regions.of(root);
    if (region.size() < 2) {
      order.push_back(n);
      continue;
    }
    dead.push_back(n);
    if (root != i) continue;  // the fused node takes the root's place
    Node* fused = fuse_region(graph, nodes, region, n, final_name);
    ir::Value* out = n->output();
    graph.replace_uses(out, fused->output());
    renames.emplace_back(fused->output(), out->name());
    final_name[fused->output()] = out->name();
    order.push_back(fused);
  }
  if (dead.empty()) return;
  order.insert(order.end(), dead.begin(), dead.end());
  graph.reorder(std::move(order));
  for (auto it = dead.rbegin(); it != dead.rend(); ++it) graph.erase(*it);
  for (auto& [v, name] : renames) graph.rename(v, name);
}

}  // namespace symmflow::passes
