// fuse_pointwise: regions of elementwise aten ops become one `fused` node.
//
// Expects: a functionalized graph (no op node writes an argument). Other node kinds are opaque.
// Guarantees:
//   - a fusible node is an op node whose op is_fusible_pointwise (tagged pointwise, neither
//     in_place nor out: Note [op tags]; add/sub/mul/div .Tensor and .Scalar, sin, cos, exp, tanh,
//     relu, gelu, silu, sigmoid, neg among the built-in ops) with one output, and whose
//     every tensor argument has exactly the output's type (same shape, same dtype: no broadcast,
//     no promotion).
//   - a producer P joins its consumer C's region when both are fusible with the same output type
//     and P's output is used by C only (every use is C), and is neither a graph output nor a
//     writeback value. Regions are therefore trees with a single output (their root), maximal
//     under that rule; a value with several users is never fused across (it stays a buffer).
//   - every region of >= 2 ops becomes one `fused` node at its root's position, whose body holds
//     the ops in their original order over body inputs named after the region's external inputs
//     (as the text format names them); its output keeps the root's name and layout. Single ops
//     are left alone. Only the region's output is a buffer.
//   - the fused executor reads flat buffers: an external input that may be a strided view
//     (ir::maybe_strided) is read through a `copy` node {copy = "identity"} placed right before
//     the fused node, whose reason names the view.
//   - O(n log n): one walk with union-find, one reorder, erasures from the back.
// Refuses: nothing (non-fusible nodes are left as they are).
#include <algorithm>
#include <numeric>
#include <set>
#include <span>
#include <string>
#include <unordered_map>

#include <fmt/format.h>

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

bool fusible_node(const Node* n) {
  if (n->kind() != NodeKind::op || !is_fusible_pointwise(*n->op()) || n->outputs().size() != 1)
    return false;
  const ir::TensorType& t = n->output()->type();
  for (const Arg& a : n->args()) {
    if (a.kind == Arg::Kind::value_list || a.kind == Arg::Kind::rank_relative) return false;
    if (a.kind == Arg::Kind::value && !(a.value->type() == t)) return false;
  }
  return true;
}

struct UnionFind {
  std::vector<size_t> parent;
  explicit UnionFind(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  size_t find(size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
};

// The regions of fusible nodes: a producer joins its single consumer's region; since the
// consumer comes later, a region's root (its representative) is its last node.
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
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!fusible[i]) continue;
    const Node* c = nodes[i];
    for (const ir::Value* v : c->inputs()) {
      const Node* p = v->producer();
      if (!p) continue;
      if (&p->owner() != &graph) continue;
      size_t at = graph.position(p);  // nodes[] is the graph's order
      if (!fusible[at] || pinned.count(v)) continue;
      if (!(v->type() == c->output()->type())) continue;
      bool only_c =
          std::all_of(v->uses().begin(), v->uses().end(), [c](const Node* u) { return u == c; });
      if (!only_c) continue;
      size_t a = uf.find(at), b = uf.find(i);
      if (a != b) uf.parent[a] = b;  // the consumer's set stays the representative
    }
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

// The fused node of one region (rooted at `root_node`), with the copies of its strided inputs
// appended to `order` before it. `final_name`: the names earlier fused outputs take at the end.
Node* fuse_region(Graph& graph, const std::vector<Node*>& nodes, std::span<const size_t> region,
                  Node* root_node, std::vector<Node*>& order,
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
  // The fused executor reads its inputs as flat buffers: a strided view is read through a copy.
  std::vector<ir::Value*> read = inputs;  // what the fused node reads
  for (ir::Value*& v : read) {
    if (!ir::maybe_strided(v)) continue;
    Node* copy =
        graph.add_copy(v, fmt::format("'{}' is a strided view read by a fused region", v->name()));
    copy->attrs()["copy"] = "identity";
    copy->set_loc(root_node->loc());
    graph.rename(copy->output(), graph.fresh_name(v->name() + "_contiguous"));
    order.push_back(copy);
    v = copy->output();
  }
  auto body = std::make_unique<Graph>("fused", graph.world_size());
  std::unordered_map<const ir::Value*, ir::Value*> inner;
  for (size_t k = 0; k < inputs.size(); ++k) {
    ir::Value* v = inputs[k];
    auto pending = final_name.find(v);  // an earlier fused node's output, renamed at the end
    std::string name = read[k] != v                  ? read[k]->name()
                       : pending == final_name.end() ? v->name()
                                                     : pending->second;
    inner[v] = body->add_input(name, v->type());
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
  Node* fused = graph.add_fused(read, std::move(body));
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
    Node* fused = fuse_region(graph, nodes, region, n, order, final_name);
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
