// reinplace: functional<op> nodes go back to the mutating op where the old value is dead.
//
// Expects: a graph in its final order (after schedule; any valid order works), possibly with
//   layouts assigned (realize_symm_mem).
// Guarantees: each functional<op> node N, in order, becomes the plain mutating op writing its
//   arguments' buffers when, for every written argument with input value `w` and new value `o`:
//   - `w` has no use after N (uses by N itself are fine: that is the op's own aliasing), and is not
//     a graph output;
//   - `w` is not a graph input, unless `o` is exactly what is written back into that input (the
//     write then lands in the caller's buffer, as eager execution does);
//   - `w` is not a view and has no view taken of it (its buffer is not shared);
//   - `w` and `o` have the same layout (a graph input's is the caller's memory: it never takes a
//     result placed in symm[g] unless the input itself is declared in symm[g]);
//   - `w` is not passed to two written arguments.
//   The new node takes N's place, arguments, attrs (but "reason"), location and return names;
//   every use of `o` (writebacks and outputs included) now reads `w`. A writeback that becomes
//   `writeback x = x` means "nothing to copy". Every functional node left gets attrs["reason"]
//   saying why its written arguments must be copied, except a put_signal / wait_signal: its dst
//   is copied by a `copy` node placed before the group's barrier that precedes it, and the op
//   writes the copy in place (Note [copies peers race with]). Idempotent; O(n log n) (plus a walk
//   back to the barrier per such copy).
// Refuses: nothing.
#include <algorithm>
#include <optional>
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

std::string describe(const Node* n) {
  if (n->outputs().empty()) return n->display_name();
  return fmt::format("{} (defining '{}')", n->display_name(), n->output()->name());
}

bool is_view_of(const Node* u, const ir::Value* base) {
  if (u->kind() != NodeKind::op) return false;
  const auto& ra = u->op()->aliases().returns_alias;
  for (int r : ra) {
    if (r >= 0 && u->args()[size_t(r)].kind == Arg::Kind::value &&
        u->args()[size_t(r)].value == base)
      return true;
  }
  return false;
}

class Reinplacer {
 public:
  explicit Reinplacer(Graph& g) : g_(g) {}

  void run() {
    std::vector<Node*> nodes = g_.nodes();
    for (size_t i = 0; i < nodes.size(); ++i) pos_[nodes[i]] = i;
    for (const ir::Value* v : g_.outputs()) outputs_.insert(v);
    for (const Graph::Writeback& b : g_.writebacks()) {
      writeback_of_[b.input] = b.value;
      written_back_into_[b.value] = b.input;
    }
    std::vector<Node*> order, dead;
    order.reserve(nodes.size());
    for (Node* n : nodes) {
      if (n->kind() != NodeKind::functional) {
        order.push_back(n);
        continue;
      }
      std::optional<std::string> why = blocker(n);
      if (why && !copy_before_barrier(n, order, *why)) {
        n->attrs()["reason"] = *why;
        order.push_back(n);
        continue;
      }
      Node* made = restore(n);
      pos_[made] = pos_[n];
      order.push_back(made);
      dead.push_back(n);
    }
    if (dead.empty()) return;
    order.insert(order.end(), dead.begin(), dead.end());
    g_.reorder(std::move(order));
    for (auto it = dead.rbegin(); it != dead.rend(); ++it) g_.erase(*it);
    for (auto& [v, name] : renames_) g_.rename(v, name);
  }

 private:
  // Note [copies peers race with]: peers put into a put_signal / wait_signal dst as soon as they
  // pass the group's barrier before the op, so a dst whose old value must be kept cannot be copied
  // in the op's own step (the copy would overwrite what a peer put). Instead a `copy` node
  // {copy = "identity"} goes before that barrier (after the value's definition) and the op writes
  // the copy in place. Applies to ops tagged signal (Note [op tags]); returns false for others.
  bool copy_before_barrier(Node* n, std::vector<Node*>& order, const std::string& why) {
    if (!n->op()->has(Tag::signal)) return false;  // Note [op tags]
    const auto& written = n->op()->aliases().written_args;
    size_t nret = n->result_count();
    for (size_t k = 0; k < written.size(); ++k) {
      ir::Value* w = n->args()[size_t(written[k])].value;
      size_t at = order.size();
      for (size_t i = order.size(); i-- > 0;) {
        const Node* m = order[i];
        if (m == w->producer()) break;
        if (m->op() && m->op()->has(Tag::barrier) && m->group() == n->group()) {
          at = i;
          break;
        }
      }
      Node* copy = g_.add_copy(w, fmt::format("{}; copied before the barrier after which peers put "
                                              "into it",
                                              why));
      copy->attrs()["copy"] = "identity";
      copy->set_loc(n->loc());
      copy->output()->set_layout(n->output(nret + k)->layout());
      g_.rename(copy->output(), g_.fresh_name(w->name()));
      pos_[copy] = pos_[n];
      order.insert(order.begin() + std::ptrdiff_t(at), copy);
      ir::Arg a = n->args()[size_t(written[k])];
      a.value = copy->output();
      n->set_arg(size_t(written[k]), a);
    }
    return true;
  }

  // Why N must stay functional, or nullopt when it can write in place.
  std::optional<std::string> blocker(const Node* n) {
    const OpDef& op = *n->op();
    const auto& written = op.aliases().written_args;
    size_t nret = n->result_count();
    std::unordered_set<const ir::Value*> seen;
    for (size_t k = 0; k < written.size(); ++k) {
      const std::string& arg = op.schema().args[size_t(written[k])].name;
      const ir::Value* w = n->args()[size_t(written[k])].value;
      const ir::Value* o = n->output(nret + k);
      if (!seen.insert(w).second)
        return fmt::format("'{}' is passed to two written arguments", w->name());
      if (outputs_.count(w))
        return fmt::format("'{}' (argument '{}') is a graph output, so its old value must be kept",
                           w->name(), arg);
      auto wb = written_back_into_.find(w);
      if (wb != written_back_into_.end() && wb->second != w)
        return fmt::format("'{}' (argument '{}') is written back into graph input '{}'", w->name(),
                           arg, wb->second->name());
      for (const Node* u : w->uses()) {
        if (u != n && pos_.at(u) > pos_.at(n))
          return fmt::format("'{}' (argument '{}') is read after the write by {}", w->name(), arg,
                             describe(u));
      }
      if (w->is_input()) {
        auto it = writeback_of_.find(w);
        if (it == writeback_of_.end() || it->second != o)
          return fmt::format(
              "'{}' (argument '{}') is a graph input whose caller's buffer must keep "
              "its value",
              w->name(), arg);
        if (o->layout().pool == ir::Pool::symm && !(w->layout() == o->layout()))
          return fmt::format(
              "'{}' (argument '{}') is a graph input in caller memory but the result "
              "must be in {}",
              w->name(), arg, o->layout().str());
      } else {
        if (w->producer()->kind() == NodeKind::op) {
          if (w->producer()->op()->aliases().output_alias(size_t(w->index())) >= 0)
            return fmt::format("'{}' (argument '{}') is a view made by {}", w->name(), arg,
                               w->producer()->display_name());
        }
        if (o->layout().pool != ir::Pool::unassigned && !(w->layout() == o->layout()))
          return fmt::format("'{}' (argument '{}') is in {} but the result must be in {}",
                             w->name(), arg, w->layout().str(), o->layout().str());
      }
      for (const Node* u : w->uses()) {
        if (is_view_of(u, w))
          return fmt::format("'{}' (argument '{}') has a view made by {}", w->name(), arg,
                             describe(u));
      }
    }
    return std::nullopt;
  }

  Node* restore(Node* n) {
    const OpDef& op = *n->op();
    std::vector<ir::KwArg> kwargs;
    for (size_t i = 0; i < n->args().size(); ++i) {
      if (!n->args()[i].defaulted) kwargs.emplace_back(op.schema().args[i].name, n->args()[i]);
    }
    Node* made = g_.add_op(op, {}, kwargs);
    made->set_loc(n->loc());
    for (const auto& [k, v] : n->attrs()) {
      if (k != "reason") made->attrs()[k] = v;
    }
    size_t nret = n->result_count();
    for (size_t r = 0; r < nret; ++r) {
      made->output(r)->set_layout(n->output(r)->layout());
      g_.replace_uses(n->output(r), made->output(r));
      renames_.emplace_back(made->output(r), n->output(r)->name());
    }
    const auto& written = op.aliases().written_args;
    for (size_t k = 0; k < written.size(); ++k) {
      ir::Value* w = n->args()[size_t(written[k])].value;
      ir::Value* o = n->output(nret + k);
      if (outputs_.count(o)) {
        outputs_.erase(o);
        outputs_.insert(w);
      }
      g_.replace_uses(o, w);
      auto wb = writeback_of_.find(w);
      if (wb != writeback_of_.end() && wb->second == o) {
        wb->second = w;
        written_back_into_.erase(o);
        written_back_into_[w] = w;
      }
    }
    return made;
  }

  Graph& g_;
  std::unordered_map<const Node*, size_t> pos_;
  std::unordered_set<const ir::Value*> outputs_;
  std::unordered_map<const ir::Value*, const ir::Value*> writeback_of_;       // input -> value
  std::unordered_map<const ir::Value*, const ir::Value*> written_back_into_;  // value -> input
  std::vector<std::pair<ir::Value*, std::string>> renames_;
};

}  // namespace

void reinplace(ir::Graph& graph) {
  Reinplacer(graph).run();
}

}  // namespace symmflow::passes
