// Graph verifier (see verify.hpp for what it checks). Runs in time linear in the graph size
// (one shape-function call per node). Membership tests use a flat open-addressing set of
// pointers (node-based sets made the verifier memory-bound on large graphs); a use list is
// scanned when short and indexed in a hash set of (value, user) pairs once when long, so a value
// with k uses costs O(k), not O(k^2).
#include "symmflow/ir/verify.hpp"

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "symmflow/ops/group_size.hpp"

namespace symmflow::ir {

namespace {

// A set of pointers in one array, linear probing, grown at half full.
class PointerSet {
 public:
  explicit PointerSet(size_t expected) {
    size_t cap = 16;
    while (cap < 2 * expected) cap *= 2;
    slots_.assign(cap, nullptr);
  }
  bool insert(const void* p) {  // true when p was not there
    if (2 * (size_ + 1) > slots_.size()) grow();
    const void*& slot = find(p);
    if (slot) return false;
    slot = p;
    ++size_;
    return true;
  }
  bool contains(const void* p) const { return find(p) != nullptr; }

 private:
  const void*& find(const void* p) const {
    size_t mask = slots_.size() - 1;
    size_t i = (reinterpret_cast<uintptr_t>(p) >> 4) * 0x9E3779B97F4A7C15ull >> 20 & mask;
    while (slots_[i] && slots_[i] != p) i = (i + 1) & mask;
    return slots_[i];
  }
  void grow() {
    std::vector<const void*> old(slots_.size() * 2, nullptr);
    old.swap(slots_);
    size_ = 0;
    for (const void* p : old) {
      if (p) insert(p);
    }
  }
  mutable std::vector<const void*> slots_;
  size_t size_ = 0;
};

struct UseHash {
  size_t operator()(const std::pair<const Value*, const Node*>& u) const {
    return std::hash<const void*>()(u.first) * 31 + std::hash<const void*>()(u.second);
  }
};

constexpr size_t kScanUses = 16;  // use lists up to this long are scanned

void verify_into(const Graph& g, std::vector<Diagnostic>& out) {
  // (value, user) for every use list entry of the long-listed values seen so far.
  std::unordered_set<std::pair<const Value*, const Node*>, UseHash> uses;
  std::unordered_set<const Value*> indexed;
  auto listed = [&](const Value* v, const Node* n) {
    const std::vector<Node*>& list = v->uses();
    if (list.size() <= kScanUses) return std::find(list.begin(), list.end(), n) != list.end();
    if (indexed.insert(v).second) {
      for (const Node* u : list) uses.insert({v, u});
    }
    return uses.count({v, n}) > 0;
  };
  PointerSet defined(g.inputs().size() + g.nodes().size());
  for (const Value* v : g.inputs()) defined.insert(v);
  std::unordered_set<std::string_view> names;  // views of the values' names, alive throughout
  names.reserve(g.inputs().size() + g.nodes().size());
  auto note = [&](const Node* n, std::string msg) {
    out.push_back({n ? n->loc() : SourceLoc{}, std::move(msg)});
  };
  for (const Value* v : g.inputs()) {
    if (!names.insert(v->name()).second)
      note(nullptr, fmt::format("'{}' is defined twice", v->name()));
    if (v->layout().pool == Pool::symm && !g.find_group(v->layout().group))
      note(nullptr, fmt::format("input '{}' is in {} but group '{}' is not declared", v->name(),
                                v->layout().str(), v->layout().group));
  }
  ScopedGroupSizeResolver groups(group_sizes(g));
  for (const Node* n : g.nodes()) {
    std::string what = n->display_name();
    for (const Value* v : n->inputs()) {
      if (!defined.contains(v))
        note(n, fmt::format("{} uses '{}' before it is defined", what, v->name()));
      if (!listed(v, n))
        note(n, fmt::format("internal: use list of '{}' misses {}", v->name(), what));
    }
    for (size_t i = 0; i < n->args().size(); ++i) {
      const Arg& a = n->args()[i];
      if (a.kind != Arg::Kind::rank_relative) continue;
      std::string why = n->op() ? rank_relative_error(*n->op(), i, a.rank_offset)
                                : fmt::format(
                                      "{}: argument {} is rank-relative ({}); only int "
                                      "arguments of ops with a group argument can be",
                                      what, i, rank_relative_text(a.rank_offset));
      if (!why.empty()) note(n, why);
    }
    if (n->op()) {
      std::string group = n->group();
      const std::string& garg = n->op()->group_arg();
      if (!garg.empty()) {
        if (group.empty()) {
          note(n, fmt::format("{}: group argument '{}' must be a string literal", what, garg));
        } else if (const GroupDecl* decl = g.find_group(group); !decl) {
          note(n, fmt::format("{}: group '{}' is not declared (add `group {}` before the graph)",
                              what, group, group));
        } else if (std::vector<int> left = decl->ranks_outside(g.world_size()); !left.empty()) {
          // Note [explicit groups] (graph.cpp): every rank runs every op.
          note(n, fmt::format("{}: rank{} {} of the world of {} {} in no subgroup of group '{}', "
                              "but every rank runs every op (list every rank in a subgroup)",
                              what, left.size() == 1 ? "" : "s", fmt::join(left, ", "),
                              g.world_size(), left.size() == 1 ? "is" : "are", group));
        }
      }
      for (const std::string& sa : n->op()->symm_args()) {
        const Arg& a = n->args()[size_t(n->op()->schema().arg_index(sa))];
        std::vector<Value*> vs =
            a.kind == Arg::Kind::value ? std::vector<Value*>{a.value} : a.values;
        for (const Value* v : vs) {
          if (v->layout().pool != Pool::unassigned && !(v->layout() == Layout::symm(group)))
            note(n, fmt::format("{}: symm argument '{}' must be in symm[{}] but '{}' is in {}",
                                what, sa, group, v->name(), v->layout().str()));
        }
      }
      if (n->kind() == NodeKind::op && !n->op()->schema().returns.empty()) {
        std::vector<symmflow::Value> vals;
        for (const Arg& a : n->args()) vals.push_back(meta_value(a));
        try {
          std::vector<TensorSpec> specs = n->op()->shape_fn()(vals);
          if (specs.size() != n->outputs().size())
            note(n, fmt::format("{} has {} result{} but {} gives {}", what, n->outputs().size(),
                                n->outputs().size() == 1 ? "" : "s", what, specs.size()));
          for (size_t r = 0; r < specs.size() && r < n->outputs().size(); ++r) {
            TensorType want{specs[r].dtype, specs[r].shape};
            if (!(n->output(r)->type() == want))
              note(n, fmt::format("type of '{}' is {} but {} gives {}", n->output(r)->name(),
                                  n->output(r)->type().str(), what, want.str()));
          }
        } catch (const Error& e) {
          note(n, e.what());
        }
      }
    }
    if (n->kind() == NodeKind::fused) verify_into(*n->body(), out);
    for (const Value* v : n->outputs()) {
      if (!names.insert(v->name()).second) note(n, fmt::format("'{}' is defined twice", v->name()));
      if (v->layout().pool == Pool::symm && !g.find_group(v->layout().group))
        note(n, fmt::format("'{}' is in {} but group '{}' is not declared", v->name(),
                            v->layout().str(), v->layout().group));
      defined.insert(v);
    }
  }
  for (const Value* v : g.outputs()) {
    if (!defined.contains(v))
      out.push_back({{}, fmt::format("graph returns '{}', which is not defined", v->name())});
  }
  for (const Graph::Writeback& w : g.writebacks()) {
    if (!defined.contains(w.value))
      out.push_back({{},
                     fmt::format("writeback {} = {}: '{}' is not defined", w.input->name(),
                                 w.value->name(), w.value->name())});
  }
}

}  // namespace

std::vector<Diagnostic> verify_graph(const Graph& graph) {
  std::vector<Diagnostic> out;
  verify_into(graph, out);
  return out;
}

void verify_or_throw(const Graph& graph, const std::string& filename, const std::string& source) {
  std::vector<Diagnostic> d = verify_graph(graph);
  if (!d.empty()) throw DiagnosticError(std::move(d), filename, source);
}

}  // namespace symmflow::ir
