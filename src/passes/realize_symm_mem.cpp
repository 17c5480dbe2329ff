// realize_symm_mem: places every symm argument in symmetric memory, copying only where the
// compiler does not own the buffer (DESIGN.md, "Placement of a symm arg").
//
// Expects: a verified graph, normally functionalized (no op node writes a graph input through a
//   symm argument) and possibly holding `fused`, `functional<op>` and `copy` nodes.
// Guarantees:
//   - every Value argument bound to a symm argument of an op or functional<op> node (each element
//     of a `Tensor[]` argument too) has layout symm[g], g = the node's group literal, chosen in
//     DESIGN order for the value used:
//       (1) its buffer's producer is a compiler-owned node (op with a fresh return, fused, copy,
//           functional<op>): the producer's output, and every view (any op whose return aliases
//           an argument: aten::view, reshape, slice.Tensor, t, transpose.int, ...) between it and
//           the use, is placed in symm[g]; no copy;
//       (2) the new value of a written argument of a functional<op> node is such a buffer too; a
//           written symm argument's new value is itself placed in symm[g] (the op runs on it), as
//           is a return of an op whose out variant takes that return's `out` as a symm argument
//           (collective_permute -> collective_permute_out: "hand it a symmetric out");
//       (3) a graph input (caller memory): one `copy` {copy = "input"} before its first symm use
//           in group g, used by every symm use of that input in g (none when the input is
//           declared in symm[g]: the caller binds it in the heap; views of it then share it);
//       (4) anything else (already placed in another colour, e.g. needed by two groups, a view
//           of a graph input, or a view that may be strided (ir::maybe_strided: its strides,
//           followed through the view chain, are not contiguous: a transpose that no other
//           cancels, a slice off dim 0 or with a step), since peers address a symm arg
//           contiguously): one
//           `copy` {copy = "identity"} per (value, group), before the first such use.
//     Every copy carries attrs["reason"] naming the value, the argument, the op and the group.
//     A copy goes right before its first use, or before the last barrier of the group (an op of
//     the group tagged barrier: Note [op tags]) between the source's definition and that use:
//     peers may put into or get from the buffer as soon as they pass the barrier that publishes it.
//     Uses that are not symm arguments keep the original value.
//   - every other node output gets a layout: a view inherits its base's layout, anything else is
//     `regular`. Graph inputs keep theirs (unassigned: caller memory). Fused bodies are untouched
//     (their values are not buffers).
//   - idempotent: a second run finds every symm argument placed and changes nothing. Linear in
//     the graph (plus log factors for the copy table), copies inserted with one final reorder.
// Refuses (DiagnosticError at the node): a symm argument without a group literal; an op node
//   that writes a symm argument in place when that argument would need a copy (a graph input, a
//   view of one, or a buffer already in another group): the write would land in the copy and be
//   lost, so the graph must be functionalized first.
#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "symmflow/ir/diagnostics.hpp"
#include "symmflow/passes/passes.hpp"

namespace symmflow::passes {

namespace {

using ir::Arg;
using ir::Graph;
using ir::Layout;
using ir::Node;
using ir::NodeKind;
using ir::Pool;
using ir::Value;

[[noreturn]] void refuse(const Node* node, std::string message) {
  throw ir::DiagnosticError({{node->loc(), std::move(message)}}, "<graph>", "");
}

// The value a view's result aliases (its producer is an op whose return aliases a tensor
// argument), or null when `v` owns its buffer.
Value* view_source(const Value* v) {
  const Node* p = v->producer();
  if (!p || p->kind() != NodeKind::op) return nullptr;
  const int alias = p->op()->aliases().output_alias(size_t(v->index()));
  if (alias < 0) return nullptr;
  const Arg& a = p->args()[size_t(alias)];
  return a.kind == Arg::Kind::value ? a.value : nullptr;
}

bool contains(const std::vector<int>& xs, int x) {
  for (int y : xs) {
    if (y == x) return true;
  }
  return false;
}

class Realizer {
 public:
  explicit Realizer(Graph& graph) : graph_(graph) {}

  void run() {
    original_ = graph_.nodes();
    const std::vector<Node*>& original = original_;
    for (size_t i = 0; i < original.size(); ++i) {
      const Node* n = original[i];
      position_[n] = int(i);
      bool fence = n->op() && n->op()->has(Tag::barrier) && !n->group().empty();
      if (fence) fences_[n->group()].push_back(int(i));
    }
    for (Node* node : original) {
      if ((node->kind() == NodeKind::op || node->kind() == NodeKind::functional) &&
          !node->op()->symm_args().empty()) {
        place_symm_args(node);
      }
      if (node->kind() == NodeKind::functional || node->kind() == NodeKind::op) place_outputs(node);
    }
    insert_copies(original);
    assign_remaining();
  }

 private:
  struct Use {
    Node* node;
    std::string arg;  // schema name of the symm argument
    std::string group;
    bool written;  // the op writes this argument in place
  };

  void place_symm_args(Node* node) {
    const OpDef& op = *node->op();
    std::string group = node->group();
    if (group.empty()) {
      refuse(node, fmt::format("{}: symm arguments need a group, but '{}' is not a string literal",
                               node->display_name(), op.group_arg()));
    }
    for (const std::string& name : op.symm_args()) {
      int idx = op.schema().arg_index(name);
      Use use{node, name, group,
              node->kind() == NodeKind::op && contains(op.aliases().written_args, idx)};
      Arg arg = node->args()[size_t(idx)];
      bool changed = false;
      if (arg.kind == Arg::Kind::value) {
        Value* placed = place(arg.value, use);
        changed = placed != arg.value;
        arg.value = placed;
      } else if (arg.kind == Arg::Kind::value_list) {
        for (Value*& v : arg.values) {
          Value* placed = place(v, use);
          changed = changed || placed != v;
          v = placed;
        }
      }
      if (changed) node->set_arg(size_t(idx), std::move(arg));
    }
  }

  // Outputs that must themselves be symmetric: new values of written symm args of functional
  // nodes (the op runs on that buffer), and returns whose out-variant `out` is a symm arg.
  void place_outputs(Node* node) {
    const OpDef& op = *node->op();
    if (op.group_arg().empty()) return;
    if (node->kind() == NodeKind::op && (op.out_variant().empty() || op.aliases().is_mutable()))
      return;
    std::string group = node->group();
    if (group.empty()) return;
    auto is_symm = [&op](const std::string& arg_name) {
      for (const std::string& s : op.symm_args()) {
        if (s == arg_name) return true;
      }
      return false;
    };
    auto claim = [&group](Value* v) {
      if (v->layout().pool == Pool::unassigned) v->set_layout(Layout::symm(group));
    };
    if (node->kind() == NodeKind::functional) {
      const std::vector<int>& written = op.aliases().written_args;
      size_t nret = node->result_count();
      for (size_t k = 0; k < written.size(); ++k) {
        if (is_symm(op.schema().args[size_t(written[k])].name)) claim(node->output(nret + k));
      }
      return;
    }
    if (op.out_variant().empty() || op.aliases().is_mutable()) return;
    const OpDef* out_op = Registry::global().find(op.out_variant());
    if (!out_op) return;
    const std::vector<int>& out_args = out_op->aliases().out_args;
    for (size_t r = 0; r < node->outputs().size() && r < out_args.size(); ++r) {
      const std::string& out_name = out_op->schema().args[size_t(out_args[r])].name;
      bool symm = false;
      for (const std::string& s : out_op->symm_args()) symm = symm || s == out_name;
      if (symm && op.aliases().output_alias(r) < 0) claim(node->output(r));
    }
  }

  // The value the symm use should read: `v` itself (placed in symm[group]) or a copy.
  Value* place(Value* v, const Use& use) {
    Layout want = Layout::symm(use.group);
    std::string where =
        fmt::format("symm arg '{}' of {} (group {})", use.arg, use.node->display_name(), use.group);
    if (ir::maybe_strided(v)) {  // peers address a symm arg contiguously
      std::string why = fmt::format("'{}' is a strided view", v->name());
      return copy_of(v, use, "identity", fmt::format("{} and feeds {}", why, where), why);
    }
    if (v->layout() == want) return v;
    std::vector<Value*> chain{v};
    while (Value* src = view_source(chain.back())) chain.push_back(src);
    Value* base = chain.back();
    if (base->is_input()) {
      bool chain_free = true;
      for (Value* c : chain) {
        chain_free = chain_free &&
                     (c == base || c->layout().pool == Pool::unassigned || c->layout() == want);
      }
      if (base->layout() == want && chain_free) {  // the caller binds it in the heap
        for (Value* c : chain) c->set_layout(want);
        return v;
      }
      if (base == v) {
        return copy_of(v, use, "input", fmt::format("graph input '{}' feeds {}", v->name(), where),
                       fmt::format("graph input '{}' is caller memory", v->name()));
      }
      return copy_of(v, use, "identity",
                     fmt::format("'{}' is a view of graph input '{}' and feeds {}", v->name(),
                                 base->name(), where),
                     fmt::format("'{}' is a view of graph input '{}' (caller memory)", v->name(),
                                 base->name()));
    }
    for (Value* c : chain) {
      if (c->layout().pool != Pool::unassigned && !(c->layout() == want)) {
        std::string why = c == v
                              ? fmt::format("'{}' is already in {}", v->name(), c->layout().str())
                              : fmt::format("'{}' is a view of '{}', which is already in {}",
                                            v->name(), c->name(), c->layout().str());
        return copy_of(v, use, "identity", fmt::format("{} and feeds {}", why, where), why);
      }
    }
    for (Value* c : chain) c->set_layout(want);  // paths (1) and (2): no copy
    return v;
  }

  Value* copy_of(Value* source, const Use& use, const std::string& kind, const std::string& reason,
                 const std::string& why) {
    if (use.written) {
      refuse(use.node,
             fmt::format("{} writes symm arg '{}' in place, but {} and would need a copy into "
                         "symm[{}]; the write would land in the copy and be lost (run "
                         "functionalize first)",
                         use.node->display_name(), use.arg, why, use.group));
    }
    auto key = std::make_pair(static_cast<const Value*>(source), use.group);
    auto it = copies_.find(key);
    if (it != copies_.end()) return it->second;
    Node* copy = graph_.add_copy(source, reason);
    copy->attrs()["copy"] = kind;
    Value* out = copy->output();
    graph_.rename(out, graph_.fresh_name(fmt::format("{}_{}", source->name(), use.group)));
    out->set_layout(Layout::symm(use.group));
    copies_before_[anchor(source, use)].push_back(copy);
    copies_.emplace(std::move(key), out);
    return out;
  }

  // Where a copy for `use` goes: before the use, or before the last barrier of the group between
  // the source's definition and the use, which publishes the copy to peers that put into or get
  // from it right after the barrier.
  Node* anchor(const Value* source, const Use& use) const {
    auto it = fences_.find(use.group);
    if (it == fences_.end()) return use.node;
    const int from = source->producer() ? position_.at(source->producer()) : -1;
    const int to = position_.at(use.node);
    // The last barrier before the use (positions ascend: a binary search, since a graph of
    // 100,000 nodes had thousands of copies and as many barriers), if it follows the source.
    const std::vector<int>& at = it->second;
    auto last = std::lower_bound(at.begin(), at.end(), to);
    if (last == at.begin() || *(last - 1) <= from) return use.node;
    return original_[size_t(*(last - 1))];
  }

  // Copies were appended; one reorder puts each before its anchor.
  void insert_copies(const std::vector<Node*>& original) {
    if (copies_before_.empty()) return;
    std::vector<Node*> order;
    order.reserve(graph_.nodes().size());
    for (Node* n : original) {
      auto it = copies_before_.find(n);
      if (it != copies_before_.end())
        order.insert(order.end(), it->second.begin(), it->second.end());
      order.push_back(n);
    }
    graph_.reorder(std::move(order));
  }

  void assign_remaining() {
    for (Node* n : graph_.nodes()) {
      for (Value* v : n->outputs()) {
        if (v->layout().pool != Pool::unassigned) continue;
        Value* src = view_source(v);
        v->set_layout(src && src->layout().pool != Pool::unassigned ? src->layout()
                                                                    : Layout::regular());
      }
    }
  }

  Graph& graph_;
  std::map<std::pair<const Value*, std::string>, Value*> copies_;
  std::unordered_map<const Node*, std::vector<Node*>> copies_before_;
  std::unordered_map<const Node*, int> position_;               // in the original order
  std::vector<Node*> original_;                                 // the nodes before any copy
  std::unordered_map<std::string, std::vector<int>> fences_;  // barriers' positions per group
};

}  // namespace

void realize_symm_mem(ir::Graph& graph) {
  Realizer(graph).run();
}

}  // namespace symmflow::passes
