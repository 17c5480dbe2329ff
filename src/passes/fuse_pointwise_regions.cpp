// The regions of fuse_pointwise: fuse_pointwise_regions.hpp; the Notes are in fuse_pointwise.cpp
// except Note [recomputed producers], here.
#include "passes/fuse_pointwise_regions.hpp"

#include <algorithm>
#include <numeric>
#include <set>
#include <unordered_set>

namespace symmflow::passes::fusion {

namespace {

using ir::Graph;
using ir::Node;

// Note [fused region size] (fuse_pointwise.cpp).
constexpr size_t kMaxFusedOps = 12;
constexpr size_t kMaxFusedInputs = 8;
constexpr size_t kMaxFusedOutputs = 2;  // with 8 inputs, the GPU program's 10 tensors

// Note [recomputed producers]: RMSNorm's backward reads g * w (a gradient times the norm's
// weight) in two regions that cannot merge: one feeds the row sum the other reads (Note [sibling
// regions]). As its own kernel the product costs a launch, a pass writing it and two reading it;
// copied into both regions it costs their reads of g (w is a broadcast row). So a producer of at
// most kMaxRecomputedInputs tensors whose users lie in at most kMaxRecomputedRegions regions
// that stay apart joins each of them as a copy, where each has room, and its own node goes. A
// region that reads a value only through its copy of such a producer reads it as an input, so
// the value's region outputs it (Regions::outputs); the producers of a recomputed node join no
// region through it, so copies never chain. Only a producer of values no fusible node makes
// (GEMM results, views, graph inputs) is copied: in the norm after a residual add, g = a + b
// feeds g * w, and copying g * w kept the add out of the regions, where leaving it a buffer lets
// the add merge the two regions that read g (Note [sibling regions]): one kernel fewer.
constexpr size_t kMaxRecomputedInputs = 2, kMaxRecomputedRegions = 3;

struct UnionFind {
  std::vector<size_t> parent;
  explicit UnionFind(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  size_t find(size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
};

class Builder {
 public:
  Builder(const Graph& graph, const std::vector<Node*>& nodes, const std::vector<bool>& fusible)
      : graph_(graph), nodes_(nodes), fusible_(fusible), none_(nodes.size()), uf_(nodes.size()),
        members_(nodes.size()), external_(nodes.size()), recomputed_(nodes.size(), false) {
    for (const ir::Value* v : graph.outputs()) pinned_.insert(v);
    for (const Graph::Writeback& w : graph.writebacks()) pinned_.insert(w.value);
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!fusible[i]) continue;
      members_[i] = {i};
      for (const ir::Value* in : nodes[i]->inputs()) external_[i].insert(in);
    }
  }

  Regions build();

 private:
  size_t at(const Node* u) const { return &u->owner() == &graph_ ? graph_.position(u) : none_; }
  void use_regions(const ir::Value* v, std::set<size_t>& out);
  bool leaves(const ir::Value* v, const std::set<size_t>& inside);
  bool path_between(const std::set<size_t>& roots);
  size_t merge(const std::set<size_t>& roots, size_t i);
  void recompute(const std::set<size_t>& roots, size_t i);
  void join(size_t region, size_t i);

  const Graph& graph_;
  const std::vector<Node*>& nodes_;
  const std::vector<bool>& fusible_;
  const size_t none_;
  std::unordered_set<const ir::Value*> pinned_;  // graph outputs and writeback values
  UnionFind uf_;
  std::vector<std::vector<size_t>> members_;           // per root, any order
  std::vector<std::set<const ir::Value*>> external_;   // per root: inputs from outside it
  std::vector<bool> recomputed_;
};

// The regions (roots) that read `v`: a use by a recomputed node is a use by every region that
// holds a copy of it, its users' regions; none_ for a use in another graph.
void Builder::use_regions(const ir::Value* v, std::set<size_t>& out) {
  for (const Node* u : v->uses()) {
    const size_t k = at(u);
    if (k == none_ || !recomputed_[k]) {
      out.insert(k == none_ ? none_ : uf_.find(k));
      continue;
    }
    for (const Node* w : u->output()->uses()) {
      const size_t kw = at(w);
      out.insert(kw == none_ ? none_ : uf_.find(kw));
    }
  }
}

// Whether `v` is a graph output or writeback value, or read by a region not in `inside`.
bool Builder::leaves(const ir::Value* v, const std::set<size_t>& inside) {
  if (pinned_.count(v)) return true;
  std::set<size_t> readers;
  use_regions(v, readers);
  return std::any_of(readers.begin(), readers.end(),
                     [&](size_t r) { return !inside.count(r); });
}

// Whether a path leads from one of the regions `roots` to another through nodes outside them,
// regions taken whole (a region becomes one node, so a path into any member continues from all
// of them): merging them would make a cycle (Note [sibling regions]).
bool Builder::path_between(const std::set<size_t>& roots) {
  std::vector<bool> seen(nodes_.size(), false);
  std::vector<size_t> stack;
  auto push_readers = [&](const ir::Value* v) {
    std::set<size_t> readers;
    use_regions(v, readers);
    for (size_t q : readers)
      if (q != none_) stack.push_back(q);
  };
  for (size_t r : roots) {
    for (size_t m : members_[r]) {
      if (recomputed_[m]) continue;  // its readers outside hold copies of their own
      std::set<size_t> readers;
      use_regions(nodes_[m]->output(), readers);
      for (size_t q : readers)  // edges among the regions become internal
        if (q != none_ && !roots.count(q)) stack.push_back(q);
    }
  }
  while (!stack.empty()) {
    const size_t q = stack.back();
    stack.pop_back();
    if (roots.count(q)) return true;  // back into the regions after leaving them
    if (seen[q]) continue;
    seen[q] = true;
    if (!fusible_[q]) {
      for (const ir::Value* v : nodes_[q]->outputs()) push_readers(v);
      continue;
    }
    for (size_t m : members_[q])
      if (!recomputed_[m]) push_readers(nodes_[m]->output());
  }
  return false;
}

// Note [sibling regions]: producer `i`'s users lie in several regions (`roots`). They merge into
// one region, with an output per value that leaves it, when no path leads from one to another
// and the result fits (Note [fused region size]). Returns the merged root (its last member), or
// none_ when they stay apart.
size_t Builder::merge(const std::set<size_t>& roots, size_t i) {
  std::set<size_t> members{i};
  for (size_t r : roots) members.insert(members_[r].begin(), members_[r].end());
  if (members.size() > kMaxFusedOps) return none_;
  std::set<const ir::Value*> defined, external;
  for (size_t m : members) defined.insert(nodes_[m]->output());
  size_t outputs = 0;
  for (size_t m : members) {
    if (m != i && !recomputed_[m]) outputs += leaves(nodes_[m]->output(), roots);
    for (const ir::Value* in : nodes_[m]->inputs())
      if (!defined.count(in)) external.insert(in);
  }
  if (outputs > kMaxFusedOutputs || external.size() > kMaxFusedInputs) return none_;
  if (path_between(roots)) return none_;
  const size_t last = *roots.rbegin();  // roots are node indices: the last is the latest
  for (size_t r : roots) {
    if (r == last) continue;
    uf_.parent[r] = last;
    members_[last].insert(members_[last].end(), members_[r].begin(), members_[r].end());
    members_[r].clear();
  }
  external_[last] = std::move(external);
  return last;
}

// Note [recomputed producers]: a copy of `i` into each of `roots`, if every one has room.
void Builder::recompute(const std::set<size_t>& roots, size_t i) {
  const ir::Value* v = nodes_[i]->output();
  if (roots.size() > kMaxRecomputedRegions || nodes_[i]->inputs().size() > kMaxRecomputedInputs)
    return;
  for (const ir::Value* in : nodes_[i]->inputs()) {  // its producer may merge with it instead
    const Node* p = in->producer();
    if (p && &p->owner() == &graph_ && fusible_[graph_.position(p)]) return;
  }
  std::vector<std::set<const ir::Value*>> grown;
  for (size_t r : roots) {
    if (members_[r].size() + 1 > kMaxFusedOps) return;
    grown.push_back(external_[r]);
    grown.back().erase(v);
    grown.back().insert(external_[i].begin(), external_[i].end());
    if (grown.back().size() > kMaxFusedInputs) return;
  }
  size_t k = 0;
  for (size_t r : roots) {
    members_[r].push_back(i);
    external_[r] = std::move(grown[k++]);
  }
  members_[i].clear();
  recomputed_[i] = true;
}

// `i` joins `region` when it still fits (Note [fused region size]).
void Builder::join(size_t region, size_t i) {
  const ir::Value* v = nodes_[i]->output();
  if (members_[region].size() + 1 > kMaxFusedOps) return;
  std::set<const ir::Value*> grown = external_[region];
  grown.erase(v);
  grown.insert(external_[i].begin(), external_[i].end());
  if (grown.size() > kMaxFusedInputs) return;
  uf_.parent[i] = region;  // i is still alone: only its users were placed
  members_[region].push_back(i);
  members_[i].clear();
  external_[region] = std::move(grown);
}

Regions Builder::build() {
  // From the last node back (Note [regions with shared values]): a producer joins when every use
  // of its value is a fusible node with the value's shape, of one region or of several that
  // merge (Note [sibling regions]) or take a copy each (Note [recomputed producers]). Its users
  // were placed already, and a region's root, its last node, is the set's representative.
  for (size_t i = nodes_.size(); i-- > 0;) {
    const ir::Value* v = fusible_[i] ? nodes_[i]->output() : nullptr;
    if (!v || pinned_.count(v) || v->uses().empty()) continue;
    std::set<size_t> roots;
    bool joins = true;
    for (const Node* u : v->uses()) {
      const size_t k = at(u);
      if (k == none_ || !fusible_[k] || recomputed_[k] ||
          u->output()->type().shape != v->type().shape) {
        joins = false;  // a broadcast into a bigger value stays external, as any other use
        break;
      }
      roots.insert(uf_.find(k));
    }
    if (!joins) continue;
    if (roots.size() == 1) {
      join(*roots.begin(), i);
    } else if (const size_t merged = merge(roots, i); merged != none_) {
      join(merged, i);
    } else {
      recompute(roots, i);
    }
  }
  Regions out;
  out.members.resize(nodes_.size());
  out.outputs.resize(nodes_.size());
  out.root.resize(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    out.root[i] = fusible_[i] && !recomputed_[i] ? uf_.find(i) : i;
    if (!fusible_[i] || uf_.find(i) != i) continue;
    std::vector<size_t>& m = out.members[i];
    m = members_[i];
    std::sort(m.begin(), m.end());
    m.erase(std::unique(m.begin(), m.end()), m.end());
    if (m.size() < 2) continue;
    for (size_t k : m) {
      ir::Value* v = nodes_[k]->output();
      if (!recomputed_[k] && (k == i || leaves(v, {i}))) out.outputs[i].push_back(v);
    }
  }
  out.recomputed = std::move(recomputed_);
  return out;
}

}  // namespace

Regions find_regions(const Graph& graph, const std::vector<Node*>& nodes,
                     const std::vector<bool>& fusible) {
  return Builder(graph, nodes, fusible).build();
}

}  // namespace symmflow::passes::fusion
