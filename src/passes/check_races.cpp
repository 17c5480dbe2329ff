// check_races: proves that every access to symmetric memory by a peer is ordered against the
// owner's accesses to the same buffer, on every rank of the world the graph is compiled for.
//
// Expects: the final graph of the pipeline (after schedule and reinplace, before plan_memory), so
//   that nodes() is the step order every rank runs and each buffer is the value (or the base of
//   the view) that the steps name; graph.world_size() ranks (small: the simulation is explicit).
// Guarantees: find_races returns one diagnostic per race or signal that cannot be matched, in
//   line order, at most 20 (kMaxDiagnostics); empty means: for every symmetric buffer that a peer
//   writes (put_signal's dst) or reads (get's src), on every rank that owns a copy, each pair of
//   accesses of which one is by a peer and one writes is ordered by happens-before
//   (Note [happens-before]); this covers (a) a peer's write after the owner's last access of the
//   old contents and (b) the owner's reads after the write they need. Two consecutive runs are
//   simulated, so a write of the next run racing with this run's reads is found too.
// Refuses: nothing; check_races throws ir::DiagnosticError with what find_races found.
//
// Note [happens-before]: an SPMD simulation with one vector clock per rank. Every rank runs the
// same steps; rank-relative peers (`rank+1`) resolve per rank in the node's group, literal peers
// are the same group rank on every rank. Edges:
//   - program order on each rank;
//   - the k-th put_signal from r to p on (group, channel) happens before the k-th wait_signal on
//     p for (r, channel) returns (the signal pad holds one flag per sender and channel);
//   - a barrier, and every collective that is not one_sided, of a group instance: all members'
//     earlier steps happen before all members' later steps. The accesses a collective makes
//     itself (its own peers' copies included) lie between the two and are the op's business, so
//     two accesses of one collective step never race;
//   - each run starts with a barrier in every group of a peer_written op (Note [barrier before
//     each run] in src/exec/executable.cpp).
// Nothing else orders: in particular a put_signal's data lands before its signal, so a wait for
// the previous signal on the same flag orders nothing about the next put's data.
//
// Note [what a step accesses]: per node, on the rank that runs it:
//   - view ops access nothing; aten::empty.memory_format only allocates (kAllocOnly: no tag
//     says this yet), so a peer may put into a fresh inbox without a barrier;
//   - put_signal (signal-tagged, with a tensor it reads): reads its other tensors locally,
//     writes its written arg on the peer, then raises the signal; wait_signal (signal-tagged,
//     no other tensor): consumes a signal, accesses no data;
//   - get (peer_read): reads its unwritten symm args on the peer, writes its written args;
//   - other nodes read their tensor arguments and write their written arguments and their fresh
//     results (the base buffer of a view is what a view names);
//   - the end of a run reads the outputs and the written-back values (the caller's reads).
#include "symmflow/passes/check_races.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>

#include "passes/check_races_sim.hpp"

namespace symmflow::passes {

namespace {

using ir::Arg;
using ir::Node;
using ir::NodeKind;
using ir::Value;

constexpr const char* kAllocOnly = "aten::empty.memory_format";  // Note [what a step accesses]

const Value* base_of(const Value* v) {
  while (true) {
    const Node* p = v->producer();
    if (!p || p->kind() != NodeKind::op) return v;
    const int alias = p->op()->aliases().output_alias(size_t(v->index()));
    if (alias < 0) return v;
    const Arg& a = p->args()[size_t(alias)];
    if (a.kind != Arg::Kind::value) return v;
    v = a.value;
  }
}

void add_values(const Arg& a, std::vector<const Value*>& out) {
  if (a.kind == Arg::Kind::value) out.push_back(base_of(a.value));
  for (const Value* v : a.values) out.push_back(base_of(v));
}

// Buffers the node writes through its written arguments (for functional<op>: the new values).
std::vector<const Value*> written_buffers(const Node& n) {
  std::vector<const Value*> out;
  const std::vector<int>& written = n.op()->aliases().written_args;
  if (n.kind() == NodeKind::functional) {
    size_t first = n.result_count();
    for (size_t k = 0; k < written.size() && first + k < n.outputs().size(); ++k)
      out.push_back(n.outputs()[first + k]);
    return out;
  }
  for (int i : written) add_values(n.args()[size_t(i)], out);
  return out;
}

bool is_written_arg(const Node& n, size_t i) {
  const std::vector<int>& w = n.op()->aliases().written_args;
  return std::find(w.begin(), w.end(), int(i)) != w.end();
}

bool is_symm_arg(const Node& n, size_t i) {
  const std::vector<std::string>& s = n.op()->symm_args();
  return std::find(s.begin(), s.end(), n.op()->schema().args[i].name) != s.end();
}

// Fresh results of a node: written at definition unless the op only allocates.
void add_fresh_outputs(const Node& n, std::vector<const Value*>& out) {
  if (n.kind() == NodeKind::op && n.op()->name() == kAllocOnly) return;
  for (const Value* v : n.outputs()) {
    if (base_of(v) == v) out.push_back(v);
  }
}

void set_peer(const Node& n, SimStep& s) {
  const FunctionSchema& sc = n.op()->schema();
  int peer = sc.arg_index("peer"), channel = sc.arg_index("channel");
  if (peer >= 0) {
    const Arg& a = n.args()[size_t(peer)];
    s.peer_relative = a.kind == Arg::Kind::rank_relative;
    s.peer = s.peer_relative ? a.rank_offset
                             : (a.literal.is_int() ? a.literal.to_int() : int64_t(-1));
  }
  if (channel >= 0 && n.args()[size_t(channel)].literal.is_int())
    s.channel = n.args()[size_t(channel)].literal.to_int();
}

// One-sided ops: Note [what a step accesses].
void classify_one_sided(const Node& n, SimStep& s) {
  set_peer(n, s);
  const TagSet tags = n.op()->tags();
  std::vector<const Value*> unwritten_tensors;
  for (size_t i = 0; i < n.args().size(); ++i) {
    if (!is_written_arg(n, i)) add_values(n.args()[i], unwritten_tensors);
  }
  if (tags.has(Tag::signal)) {
    if (unwritten_tensors.empty()) {
      s.kind = SimStep::Kind::wait;
      return;
    }
    s.kind = SimStep::Kind::put;
    s.reads = unwritten_tensors;
    s.remote_writes = written_buffers(n);
    return;
  }
  if (tags.has(Tag::peer_read)) {
    s.kind = SimStep::Kind::get;
    for (size_t i = 0; i < n.args().size(); ++i) {
      if (is_written_arg(n, i)) continue;
      add_values(n.args()[i], is_symm_arg(n, i) ? s.remote_reads : s.reads);
    }
    s.writes = written_buffers(n);
    add_fresh_outputs(n, s.writes);
    return;
  }
  s.reads = unwritten_tensors;  // an unknown one-sided op: its local accesses only
  s.writes = written_buffers(n);
  add_fresh_outputs(n, s.writes);
}

SimStep classify(const Node& n) {
  SimStep s;
  s.node = &n;
  if (n.kind() == NodeKind::fused || n.kind() == NodeKind::copy || !n.op()) {
    for (const Arg& a : n.args()) add_values(a, s.reads);
    add_fresh_outputs(n, s.writes);
    return s;
  }
  const TagSet tags = n.op()->tags();
  if (n.kind() == NodeKind::op && tags.has(Tag::view)) return s;
  s.group = tags.has(Tag::collective) ? n.group() : std::string();
  const bool grouped = !s.group.empty();  // a group argument that is not a literal: local
  if (grouped && tags.has(Tag::one_sided)) {
    classify_one_sided(n, s);
    return s;
  }
  if (grouped) s.kind = SimStep::Kind::sync;
  if (grouped && tags.has(Tag::barrier)) return s;
  for (size_t i = 0; i < n.args().size(); ++i) {
    if (!is_written_arg(n, i)) add_values(n.args()[i], s.reads);
  }
  s.writes = written_buffers(n);
  add_fresh_outputs(n, s.writes);
  return s;
}

// The steps of one run: entry barriers, the nodes, the caller's reads at the end.
std::vector<SimStep> run_steps(const ir::Graph& graph) {
  std::vector<SimStep> steps;
  std::vector<std::string> entry;
  for (const Node* n : graph.nodes()) {
    if (!n->op() || !n->op()->has(Tag::peer_written)) continue;
    if (std::find(entry.begin(), entry.end(), n->group()) == entry.end())
      entry.push_back(n->group());
  }
  for (const std::string& g : entry) {
    SimStep s;
    s.kind = SimStep::Kind::sync;
    s.group = g;
    steps.push_back(std::move(s));
  }
  for (const Node* n : graph.nodes()) steps.push_back(classify(*n));
  SimStep end;
  end.kind = SimStep::Kind::run_end;
  for (const Value* v : graph.outputs()) end.reads.push_back(base_of(v));
  for (const auto& w : graph.writebacks()) end.reads.push_back(base_of(w.value));
  steps.push_back(std::move(end));
  return steps;
}

}  // namespace

std::vector<ir::Diagnostic> find_races(const ir::Graph& graph) {
  bool peer_access = false;
  for (const Node* n : graph.nodes()) peer_access |= n->op() && n->op()->has(Tag::one_sided);
  if (!peer_access) return {};
  std::vector<SimStep> one = run_steps(graph);
  std::vector<SimStep> two;  // Note [happens-before]: this run, then the next
  for (int run = 0; run < 2; ++run) {
    for (SimStep s : one) {
      s.run = run;
      two.push_back(std::move(s));
    }
  }
  return simulate_races(graph, two);
}

void check_races(const ir::Graph& graph, const std::string& filename, const std::string& source) {
  std::vector<ir::Diagnostic> d = find_races(graph);
  if (!d.empty()) throw ir::DiagnosticError(std::move(d), filename, source);
}

}  // namespace symmflow::passes
