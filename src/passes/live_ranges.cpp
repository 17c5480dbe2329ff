// Live ranges of the memory planner: aliases -> buffers -> [first def, last use] per colour.
// The contract (expects, guarantees, refuses) is in include/symmflow/passes/live_ranges.hpp.
#include "symmflow/passes/live_ranges.hpp"

#include <algorithm>
#include <map>
#include <string>

#include <fmt/format.h>

namespace symmflow::passes {

namespace {

class LiveRangeBuilder {
 public:
  explicit LiveRangeBuilder(const ir::Graph& graph) : graph_(graph), nodes_(graph.nodes()) {
    r_.steps = int(nodes_.size());
    r_.colours.push_back({ir::Layout::regular(), {}});
  }

  LiveRanges build() {
    collect_buffers();
    extend_by_uses();
    extend_peer_written();
    extend_unsynchronised_reads();
    return std::move(r_);
  }

 private:
  int root(int b) const {  // aliases point at the base that owns memory
    while (r_.buffers[size_t(b)].alias_of >= 0) b = r_.buffers[size_t(b)].alias_of;
    return b;
  }
  int colour_of(const ir::Value* v);
  void add_buffer(const ir::Value* v, int step, int alias_of);
  void extend(const ir::Value* v, int step);
  void own_whole_run(int buffer);

  void collect_buffers();
  void extend_by_uses();
  void extend_peer_written();
  void extend_unsynchronised_reads();

  const ir::Graph& graph_;
  const std::vector<ir::Node*>& nodes_;
  LiveRanges r_;
  std::map<std::string, int> symm_colour_;
};

int LiveRangeBuilder::colour_of(const ir::Value* v) {
  if (v->layout().pool != ir::Pool::symm) return 0;
  const std::string& g = v->layout().group;
  SF_CHECK(graph_.find_group(g),
           "plan_memory: value '{}' is placed in symm[{}] but group '{}' is not declared",
           v->name(), g, g);
  auto [it, fresh] = symm_colour_.try_emplace(g, int(r_.colours.size()));
  if (fresh) r_.colours.push_back({v->layout(), {}});
  return it->second;
}

void LiveRangeBuilder::add_buffer(const ir::Value* v, int step, int alias_of) {
  BufferPlan b;
  b.name = v->name();
  b.type = v->type();
  b.bytes = v->type().bytes();
  b.first_step = step;
  b.last_step = step;
  int index = int(r_.buffers.size());
  if (alias_of >= 0) {
    b.alias_of = root(alias_of);
  } else {
    r_.colours[size_t(colour_of(v))].buffers.push_back(index);
  }
  r_.buffers.push_back(std::move(b));
  r_.buffer_of[v] = index;
}

void LiveRangeBuilder::own_whole_run(int buffer) {
  BufferPlan& base = r_.buffers[size_t(root(buffer))];
  base.first_step = 0;
  base.last_step = r_.steps;
}

// Aliases: one buffer per value that has memory.
void LiveRangeBuilder::collect_buffers() {
  for (int step = 0; step < r_.steps; ++step) {
    const ir::Node* n = nodes_[size_t(step)];
    for (size_t r = 0; r < n->outputs().size(); ++r) {
      const ir::Value* v = n->output(r);
      int alias_arg = -1;
      if (n->kind() == ir::NodeKind::op) alias_arg = n->op()->aliases().output_alias(r);
      if (alias_arg < 0) {
        add_buffer(v, step, -1);
        continue;
      }
      const ir::Arg& a = n->args().at(size_t(alias_arg));
      if (a.kind != ir::Arg::Kind::value) {
        add_buffer(v, step, -1);
        continue;
      }
      auto base = r_.buffer_of.find(a.value);
      if (base == r_.buffer_of.end()) continue;  // a view of caller memory
      add_buffer(v, step, base->second);
    }
    if (n->kind() == ir::NodeKind::copy) {
      auto it = n->attrs().find("copy");
      if (it != n->attrs().end() && it->second == "input") {
        BufferPlan& staging = r_.buffers[size_t(r_.buffer_of.at(n->output()))];
        staging.first_step = 0;
        staging.last_step = r_.steps;
      }
    }
  }
}

void LiveRangeBuilder::extend(const ir::Value* v, int step) {
  auto it = r_.buffer_of.find(v);
  if (it == r_.buffer_of.end()) return;
  BufferPlan& b = r_.buffers[size_t(it->second)];
  b.last_step = std::max(b.last_step, step);
  BufferPlan& base = r_.buffers[size_t(root(it->second))];
  base.last_step = std::max(base.last_step, step);
}

// Live ranges over the schedule: to the last use; outputs and writebacks to the end.
void LiveRangeBuilder::extend_by_uses() {
  for (auto& [v, b] : r_.buffer_of) {
    for (const ir::Node* user : v->uses()) extend(v, int(graph_.position(user)));
  }
  for (const ir::Value* v : graph_.outputs()) {
    extend(v, r_.steps);
    if (auto it = r_.buffer_of.find(v); it != r_.buffer_of.end())
      r_.buffers[size_t(it->second)].intermediate = false;
  }
  for (const auto& w : graph_.writebacks()) extend(w.value, r_.steps);
}

// Note [peer-written buffers]: a symm arg that a one_sided op writes (put_signal's dst,
// wait_signal's dst) is stored to by peers at times this rank does not see: a peer puts as soon as
// it reaches its put_signal, which may be any number of steps ahead of this rank (and into the next
// run), and nothing closes the op on the owner's side but its own wait. Such a buffer owns its
// bytes for the whole run, so no other buffer can be placed where a late or early put lands; the
// barrier each run starts with keeps puts of the next run out of this run's reads.
//
// Note [synchronised peer writes]: a symm arg that a synchronising op writes (a collective not
// tagged one_sided: two_shot_all_reduce_'s input, collective_permute_out's out, all_to_all_vdev's
// out, reduce_scatter_out's input, broadcast_'s input) is written and read by peers only while
// this rank is inside the op: every backend opens the op with a synchronisation of the group (cpu:
// a barrier; cuda two-shot: a peer writes our chunk only after our own slices reached it, which we
// send when our kernel runs, after every earlier step in stream order) and closes it with one
// (cpu: a barrier; cuda: the op ends when every peer's writes arrived), so no peer touches our
// copy before we enter or after we leave (kernels/cpu/collectives, Note [cuda all-reduce]). Peers
// share our plan, so their copies sit at the same offset, and their own range covers the op too.
// Hence the buffer needs no more than its ordinary range, [definition, last read of the value it
// holds or of any alias], which includes the op's own step on every rank:
//   - before: the bytes' previous owner died at an earlier step of this rank, which finished
//     before the op opened, before any peer's write;
//   - after: the next owner is defined at a later step, after the op closed, after every peer's
//     write; a later read of the all-reduced value extends the range as any read does.
// A buffer that both kinds of op write is still owned for the whole run (the one_sided rule wins).
void LiveRangeBuilder::extend_peer_written() {
  for (int step = 0; step < r_.steps; ++step) {
    const ir::Node* n = nodes_[size_t(step)];
    if (n->kind() != ir::NodeKind::op && n->kind() != ir::NodeKind::functional) continue;
    const OpDef& op = *n->op();
    if (!op.has(Tag::one_sided)) continue;  // Note [synchronised peer writes]
    const auto& written = op.aliases().written_args;
    size_t new_value = n->result_count();  // functional: new values follow the results
    for (int w : written) {
      const std::string& name = op.schema().args[size_t(w)].name;
      bool symm =
          std::find(op.symm_args().begin(), op.symm_args().end(), name) != op.symm_args().end();
      std::vector<const ir::Value*> targets;
      if (n->kind() == ir::NodeKind::functional) {
        targets.push_back(n->output(new_value++));
      } else {
        const ir::Arg& a = n->args()[size_t(w)];
        if (a.kind == ir::Arg::Kind::value) targets.push_back(a.value);
        targets.insert(targets.end(), a.values.begin(), a.values.end());
      }
      if (!symm || n->group().empty()) continue;
      for (const ir::Value* v : targets) {
        auto it = r_.buffer_of.find(v);
        if (it != r_.buffer_of.end()) own_whole_run(it->second);
      }
    }
  }
}

// Note [unsynchronised peer reads]: peers read `get`'s src with no barrier closing the op, so
// that buffer stays live until the next communication of its group that synchronises every
// rank (any op of the group not tagged one_sided), or to the end. Ops tagged peer_read (get).
void LiveRangeBuilder::extend_unsynchronised_reads() {
  auto unsynchronised = [](const ir::Node* n) { return n->op()->has(Tag::one_sided); };
  for (int step = 0; step < r_.steps; ++step) {
    const ir::Node* n = nodes_[size_t(step)];
    if (!n->op() || !n->op()->has(Tag::peer_read) || n->group().empty()) continue;
    int until = step + 1;
    for (; until < r_.steps; ++until) {
      const ir::Node* m = nodes_[size_t(until)];
      if (m->op() && m->group() == n->group() && !unsynchronised(m)) break;
    }
    extend(n->args()[0].value, until);
  }
}

}  // namespace

LiveRanges compute_live_ranges(const ir::Graph& graph) {
  return LiveRangeBuilder(graph).build();
}

}  // namespace symmflow::passes
