// schedule: orders the nodes so that communication is issued as early as its inputs allow and
// independent compute overlaps it.
//
// Expects: a verified graph (source order is a topological order), normally after
//   realize_symm_mem (layouts assigned; used for barrier fences, see below).
// Guarantees: graph.nodes() becomes a topological order of these dependencies, all of which point
//   forward in the source order:
//   - data: a value's producer before each of its users;
//   - buffers (a value and every view of it share its base's buffer): a node that writes a buffer
//     (an op node's written argument, e.g. after reinplace; or the written argument of a
//     functional<op> node, so that reinplace can later write in place) comes after the buffer's
//     previous write and after every read since it; a read comes after the previous write;
//   - communication: nodes whose op has a group argument ("comm") keep their source order within
//     each group (an order token per group), so every rank issues the same sequence;
//   - fences: a comm node without tensor arguments (barrier) publishes or retires symmetric
//     memory of its group: every earlier node defining, writing or reading a symm[g] buffer stays
//     before it and every later one after it; peer writes never cross it, and neither do local
//     reads (a read moved after a barrier could see what a peer wrote after that barrier, e.g.
//     the next round's put_signal into the same buffer).
//   Priority (a list scheduler over a heap, O((n + e) log n)): a node's key is the source
//   position of the earliest comm node it leads to (itself included), or +inf; ready nodes go by
//   (key, source position). So the ancestors of the first collective run first, the collective is
//   issued as soon as they are done, and compute it does not need follows; ties keep source
//   order. Deterministic, and a fixed point: scheduling a scheduled graph changes nothing.
// Refuses: nothing (a graph whose source order is not topological fails verification first).
#include <algorithm>
#include <limits>
#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

#include "symmflow/passes/passes.hpp"

namespace symmflow::passes {

namespace {

using ir::Arg;
using ir::Node;
using ir::NodeKind;
using ir::Value;

// The group a communication node is ordered in ("" for other nodes): nodes whose op has a
// group argument.
std::string comm_group(const Node& n) {
  return n.op() && !n.op()->group_arg().empty() ? n.group() : std::string();
}

class Scheduler {
 public:
  explicit Scheduler(ir::Graph& graph) : graph_(graph), nodes_(graph.nodes()) {
    succ_.resize(nodes_.size());
    indeg_.assign(nodes_.size(), 0);
    group_.resize(nodes_.size());
    for (size_t i = 0; i < nodes_.size(); ++i) group_[i] = comm_group(*nodes_[i]);
  }

  void run() {
    if (nodes_.size() < 2) return;
    build_edges();
    std::vector<Node*> order = list_schedule(keys());
    if (order != nodes_) graph_.reorder(std::move(order));
  }

 private:
  struct BufferState {
    int last_write = -1;
    std::vector<int> reads;  // since last_write
  };
  struct Fence {
    int last = -1;             // last fence node of the group
    std::vector<int> pending;  // symm[g] definers/writers since it
  };

  void edge(int from, int to) {
    if (from < 0 || from == to) return;
    SF_ASSERT(from < to);
    succ_[size_t(from)].push_back(to);
    ++indeg_[size_t(to)];
  }

  int index_of(const Node* n) const { return int(graph_.position(n)); }

  // The value whose buffer a view result aliases, or null.
  static const Value* view_source(const Value* v) {
    const Node* p = v->producer();
    if (!p || p->kind() != NodeKind::op) return nullptr;
    const int alias = p->op()->aliases().output_alias(size_t(v->index()));
    if (alias < 0 || p->args()[size_t(alias)].kind != Arg::Kind::value) return nullptr;
    return p->args()[size_t(alias)].value;
  }

  // The value owning the buffer `v` lives in (following views); views are memoized, and the walk
  // is iterative so long view chains cannot exhaust the stack.
  const Value* base_of(const Value* v) {
    if (!view_source(v)) return v;
    std::vector<const Value*> path;
    const Value* b = v;
    while (true) {
      auto it = base_.find(b);
      if (it != base_.end()) {
        b = it->second;
        break;
      }
      const Value* src = view_source(b);
      if (!src) break;
      path.push_back(b);
      b = src;
    }
    for (const Value* x : path) base_.emplace(x, b);
    return b;
  }

  // Values whose buffer `n` writes (functional nodes count: see the contract).
  static std::vector<const Value*> written_values(const Node& n) {
    std::vector<const Value*> out;
    if (n.kind() != NodeKind::op && n.kind() != NodeKind::functional) return out;
    for (int i : n.op()->aliases().written_args) {
      const Arg& a = n.args()[size_t(i)];
      if (a.kind == Arg::Kind::value) out.push_back(a.value);
      for (const Value* v : a.values) out.push_back(v);
    }
    return out;
  }

  void build_edges() {
    // Only buffers that something writes need read/write tracking.
    std::unordered_map<const Value*, BufferState> buffers;
    for (const Node* n : nodes_) {
      for (const Value* v : written_values(*n)) buffers.emplace(base_of(v), BufferState{});
    }
    std::unordered_map<std::string, int> last_comm;
    std::unordered_map<std::string, Fence> fences;
    for (size_t idx = 0; idx < nodes_.size(); ++idx) {
      const Node& n = *nodes_[idx];
      int i = int(idx);
      // Fences of each group this node defines, writes or reads symmetric memory in.
      auto touch_symm = [&](const Value* v) {
        if (v->layout().pool != ir::Pool::symm) return;
        Fence& f = fences[v->layout().group];
        edge(f.last, i);
        if (f.pending.empty() || f.pending.back() != i) f.pending.push_back(i);
      };
      bool has_inputs = false;
      for (const Arg& a : n.args()) {
        auto read = [&](const Value* v) {
          has_inputs = true;
          touch_symm(base_of(v));  // a read must finish before a fence lets peers overwrite
          if (v->producer()) edge(index_of(v->producer()), i);
          if (buffers.empty()) return;
          auto it = buffers.find(base_of(v));
          if (it == buffers.end()) return;
          edge(it->second.last_write, i);
          it->second.reads.push_back(i);
        };
        if (a.kind == Arg::Kind::value) read(a.value);
        for (const Value* v : a.values) read(v);
      }
      std::vector<const Value*> written = written_values(n);
      for (const Value* v : written) {
        BufferState& b = buffers.at(base_of(v));
        edge(b.last_write, i);
        for (int r : b.reads) edge(r, i);
        b.reads.clear();
        b.last_write = i;
      }
      for (const Value* v : n.outputs()) {
        if (!view_source(v)) touch_symm(v);
      }
      for (const Value* v : written) touch_symm(base_of(v));
      const std::string& g = group_[idx];
      if (!g.empty()) {
        auto [it, fresh] = last_comm.emplace(g, i);
        if (!fresh) {
          edge(it->second, i);
          it->second = i;
        }
        if (!has_inputs) {
          Fence& f = fences[g];
          for (int w : f.pending) edge(w, i);
          f.pending.clear();
          f.last = i;
        }
      }
    }
  }

  // key[i] = source position of the earliest comm node reachable from i (itself included).
  std::vector<int> keys() const {
    constexpr int kNone = std::numeric_limits<int>::max();
    std::vector<int> key(nodes_.size(), kNone);
    for (size_t k = nodes_.size(); k-- > 0;) {
      int best = group_[k].empty() ? kNone : int(k);
      for (int s : succ_[k]) best = std::min(best, key[size_t(s)]);
      key[k] = best;
    }
    return key;
  }

  std::vector<Node*> list_schedule(const std::vector<int>& key) {
    using Entry = std::pair<int, int>;  // (key, source position)
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> ready;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (indeg_[i] == 0) ready.emplace(key[i], int(i));
    }
    std::vector<Node*> order;
    order.reserve(nodes_.size());
    while (!ready.empty()) {
      int i = ready.top().second;
      ready.pop();
      order.push_back(nodes_[size_t(i)]);
      for (int s : succ_[size_t(i)]) {
        if (--indeg_[size_t(s)] == 0) ready.emplace(key[size_t(s)], s);
      }
    }
    SF_ASSERT(order.size() == nodes_.size());
    return order;
  }

  ir::Graph& graph_;
  std::vector<Node*> nodes_;
  std::vector<std::string> group_;  // comm group per node, "" for others
  std::unordered_map<const Value*, const Value*> base_;
  std::vector<std::vector<int>> succ_;
  std::vector<int> indeg_;
};

}  // namespace

void schedule(ir::Graph& graph) {
  Scheduler(graph).run();
}

}  // namespace symmflow::passes
