// functionalize: every call that writes an argument becomes a pure call.
//
// Expects: a verified graph (any order of op nodes; functional, fused and copy nodes are left as
//   they are). Works for every op with a schema, custom and plugin ops included: what an op writes
//   is read off its alias annotations (OpDef::aliases()).
// Guarantees:
//   - no op node writes an argument afterwards. A node whose op writes args becomes
//     (a) its linked functional variant (op->functional_variant(): aten::add_.Tensor ->
//         aten::add.Tensor, aten::add.out -> aten::add.Tensor with the out args dropped) when that
//         variant returns exactly the new value of each written arg (same types) and the op
//         writes nothing else (an out variant that also clobbers an input, such as
//         symm_mem::two_shot_all_reduce_out, does not qualify) and returns nothing itself;
//     (b) otherwise a functional<op> node over the same arguments whose outputs are the op's
//         returns, then the new value of each written arg in argument order.
//   - every use after the mutating call sees the new value (an SSA renaming walk in node order,
//     equivalent to replace_uses from the next position), graph outputs and existing writebacks
//     included; the new value of `x` is named `x_1`, `x_2`, ...
//   - a mutated graph input gets Graph::add_writeback(input, its final value).
//   - node order is kept (each replacement takes its node's place); source locations and attrs
//     are carried over. Runs in O(n log n) (one walk, one reorder, erasures from the back).
// Refuses (ir::DiagnosticError at the node):
//   - a written argument that is a view of another value (mutation through a view), or whose
//     value has a view taken before the call and used after it (the view would see the write);
//   - a written argument that is not one tensor value (a list, or None);
//   - one value passed to two written arguments of a functional<op> call.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "symmflow/passes/passes.hpp"

namespace symmflow::passes {

namespace {

using ir::Arg;
using ir::Graph;
using ir::Node;
using ir::NodeKind;

[[noreturn]] void refuse(const Graph& g, const Node* n, const std::string& message) {
  throw ir::DiagnosticError({{n->loc(), "functionalize: " + message}}, "<graph " + g.name() + ">", "");
}

// The op whose return `v` is, when that return aliases an argument (a view); else null.
const Node* view_producer(const ir::Value* v) {
  const Node* p = v->producer();
  if (!p || p->kind() != NodeKind::op) return nullptr;
  return p->op()->aliases().output_alias(size_t(v->index())) >= 0 ? p : nullptr;
}

class Functionalizer {
 public:
  explicit Functionalizer(Graph& g) : g_(g) {}

  void run() {
    std::vector<Node*> nodes = g_.nodes();
    for (size_t i = 0; i < nodes.size(); ++i) pos_[nodes[i]] = i;
    std::vector<Node*> order, dead;
    order.reserve(nodes.size());
    for (Node* n : nodes) {
      remap_args(n);
      if (n->kind() != NodeKind::op || !n->op()->aliases().is_mutable()) {
        order.push_back(n);
        continue;
      }
      Node* replacement = functionalize_node(n);
      pos_[replacement] = pos_[n];
      order.push_back(replacement);
      dead.push_back(n);
    }
    std::vector<ir::Value*> outs = g_.outputs();
    for (ir::Value*& v : outs) v = current(v);
    g_.set_outputs(outs);
    std::vector<Graph::Writeback> existing = g_.writebacks();
    for (const Graph::Writeback& w : existing) g_.add_writeback(w.input, current(w.value));
    for (ir::Value* in : g_.inputs()) {
      ir::Value* now = current(in);
      if (now != in) g_.add_writeback(in, now);
    }
    order.insert(order.end(), dead.begin(), dead.end());
    g_.reorder(std::move(order));
    for (auto it = dead.rbegin(); it != dead.rend(); ++it) g_.erase(*it);
    for (auto& [value, name] : renames_) g_.rename(value, name);
  }

 private:
  ir::Value* current(ir::Value* v) const {
    auto it = current_.find(v);
    return it == current_.end() ? v : it->second;
  }

  // The original value `v` is a version of (itself when not a new version).
  ir::Value* root(ir::Value* v) const {
    auto it = root_.find(v);
    return it == root_.end() ? v : it->second;
  }

  void remap_args(Node* n) {
    for (size_t i = 0; i < n->args().size(); ++i) {
      Arg a = n->args()[i];
      bool changed = false;
      if (a.kind == Arg::Kind::value && current(a.value) != a.value) {
        a.value = current(a.value);
        changed = true;
      }
      for (ir::Value*& v : a.values) {
        if (current(v) != v) {
          v = current(v);
          changed = true;
        }
      }
      if (changed) n->set_arg(i, std::move(a));
    }
  }

  // Refuses mutation through views (see the contract).
  void check_views(const Node* n, const std::string& arg, const ir::Value* w) {
    if (const Node* p = view_producer(w)) {
      refuse(g_, n, fmt::format("{} writes '{}' (argument '{}'), a view made by {}; mutation through a "
                                "view is not supported",
                                n->display_name(), w->name(), arg, p->display_name()));
    }
    // Views of w taken before n and used after it would observe the write.
    std::vector<const ir::Value*> stack = {w};
    size_t here = pos_.at(n);
    while (!stack.empty()) {
      const ir::Value* base = stack.back();
      stack.pop_back();
      for (const Node* u : base->uses()) {
        if (u->kind() != NodeKind::op || pos_.at(u) >= here) continue;
        const AliasAnalysis& al = u->op()->aliases();
        for (size_t r = 0; r < u->outputs().size(); ++r) {
          if (al.output_alias(r) < 0) continue;
          const Arg& src = u->args()[size_t(al.output_alias(r))];
          if (src.kind != Arg::Kind::value || src.value != base) continue;
          const ir::Value* view = u->output(r);
          for (const Node* later : view->uses()) {
            if (pos_.at(later) > here) {
              refuse(g_, n, fmt::format("{} writes '{}' (argument '{}') but its view '{}' (made by {}) "
                                        "is used after the write, by {}; mutation through a view is "
                                        "not supported",
                                        n->display_name(), w->name(), arg, view->name(),
                                        u->display_name(), later->display_name()));
            }
          }
          stack.push_back(view);
        }
      }
    }
  }

  // The linked functional variant when it can stand in for `op` (see the contract), else null.
  const OpDef* usable_functional_variant(const OpDef& op, const std::vector<int>& results) {
    if (op.functional_variant().empty() || !op.schema().returns.empty()) return nullptr;
    const AliasAnalysis& al = op.aliases();
    if (al.is_out_variant() && al.written_args != al.out_args) return nullptr;
    const OpDef* f = Registry::global().find(op.functional_variant());
    if (!f || f->aliases().is_mutable() || f->aliases().list_return ||
        f->schema().returns.size() != results.size())
      return nullptr;
    for (int r : f->aliases().returns_alias) {
      if (r >= 0) return nullptr;
    }
    return f;
  }

  Node* functionalize_node(Node* n) {
    const OpDef& op = *n->op();
    const AliasAnalysis& al = op.aliases();
    std::vector<ir::Value*> written;
    std::unordered_set<const ir::Value*> seen;
    bool repeated = false;
    for (int i : al.written_args) {
      const Arg& a = n->args()[size_t(i)];
      const std::string& name = op.schema().args[size_t(i)].name;
      if (a.kind != Arg::Kind::value) {
        refuse(g_, n, fmt::format("{}: written argument '{}' must be one tensor value", op.name(), name));
      }
      check_views(n, name, a.value);
      repeated = repeated || !seen.insert(a.value).second;
      written.push_back(a.value);
    }
    Node* made = nullptr;
    std::vector<ir::Value*> new_values;  // one per written arg
    if (const OpDef* f = repeated ? nullptr : usable_functional_variant(op, al.written_args)) {
      made = try_functional_variant(n, *f, written);
    }
    if (made) {
      new_values = made->outputs();
    } else {
      if (repeated) {
        refuse(g_, n, fmt::format("{} is passed the same value in two written arguments",
                                  op.name()));
      }
      made = g_.add_functional(op, n->args());
      size_t nret = n->result_count();
      for (size_t r = 0; r < nret; ++r) {
        ir::Value* old = n->output(r);
        made->output(r)->set_layout(old->layout());
        current_[old] = made->output(r);
        root_[made->output(r)] = old;
        renames_.emplace_back(made->output(r), old->name());
      }
      new_values.assign(made->outputs().begin() + std::ptrdiff_t(nret), made->outputs().end());
      // add_functional names the new value of `a` `a_1`; a version of `a` continues a's series.
      for (size_t k = 0; k < written.size(); ++k) {
        if (root(written[k]) != written[k])
          g_.rename(new_values[k], g_.fresh_name(root(written[k])->name()));
      }
    }
    for (size_t k = 0; k < written.size(); ++k) {
      ir::Value* w = written[k];
      ir::Value* v = new_values[k];
      current_[w] = v;
      // Keep the chain flat: the original value (e.g. a graph input) maps to the newest one.
      ir::Value* base = root(w);
      root_[v] = base;
      current_[base] = v;
    }
    made->set_loc(n->loc());
    for (const auto& [k, v] : n->attrs()) made->attrs()[k] = v;
    return made;
  }

  // Builds `f` over n's non-out args; null when its results do not match the written values.
  Node* try_functional_variant(Node* n, const OpDef& f, const std::vector<ir::Value*>& written) {
    const OpDef& op = *n->op();
    const auto& out_args = op.aliases().out_args;
    std::vector<ir::KwArg> kwargs;
    for (size_t i = 0; i < n->args().size(); ++i) {
      if (std::find(out_args.begin(), out_args.end(), int(i)) != out_args.end()) continue;
      const Arg& a = n->args()[i];
      if (a.defaulted) continue;
      const std::string& name = op.schema().args[i].name;
      if (f.schema().arg_index(name) < 0) return nullptr;
      kwargs.emplace_back(name, a);
    }
    Node* made = nullptr;
    try {
      made = g_.add_op(f, {}, kwargs, written.size() == 1 ? root(written[0])->name() : "");
    } catch (const Error&) {
      return nullptr;  // the variant does not bind these arguments: use functional<op>
    }
    for (size_t k = 0; k < written.size(); ++k) {
      if (!(made->output(k)->type() == written[k]->type())) {
        g_.erase(made);
        return nullptr;
      }
    }
    return made;
  }

  Graph& g_;
  std::unordered_map<const Node*, size_t> pos_;
  std::unordered_map<ir::Value*, ir::Value*> current_;  // value -> its newest version
  std::unordered_map<ir::Value*, ir::Value*> root_;     // new version -> the original value
  std::vector<std::pair<ir::Value*, std::string>> renames_;
};

}  // namespace

void functionalize(ir::Graph& graph) { Functionalizer(graph).run(); }

}  // namespace symmflow::passes
