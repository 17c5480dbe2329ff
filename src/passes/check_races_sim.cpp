// The simulation of check_races (contract in src/passes/check_races.cpp; Note [happens-before]):
// every rank runs the steps; a rank moves on while its next step can (a wait needs its matching
// put, a sync needs every member of its group instance at the same step); vector clocks stamp
// each access of a buffer some peer touches, and each access must be ordered after the accesses
// of other ranks to the same rank's copy that it conflicts with (one of the two writes).
#include <algorithm>
#include <compare>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "passes/check_races_sim.hpp"

namespace symmflow::passes {

namespace {

using ir::Value;
using Clock = std::vector<int>;

constexpr size_t kMaxDiagnostics = 20;

struct Event {
  int by = 0;  // the rank that made the access
  Clock clock;
  size_t step = 0;
  bool write = false;
  int sync = -1;  // the step index when made inside a sync window (Note [happens-before])
};

struct BufferState {  // Note [last accesses]
  std::vector<std::optional<Event>> last_write, last_read;  // per rank
};

struct SignalKey {
  std::string group;
  int from = 0, to = 0;
  int64_t channel = 0;
  auto operator<=>(const SignalKey&) const = default;
};

// Buffers in name order, so that diagnostics come out the same on every compile.
struct ByName {
  bool operator()(const std::pair<int, const Value*>& a,
                  const std::pair<int, const Value*>& b) const {
    return std::tie(a.first, a.second->name()) < std::tie(b.first, b.second->name());
  }
};

struct PendingPut {
  Clock clock;
  size_t step;
};

class Simulator {
 public:
  Simulator(const ir::Graph& graph, const std::vector<SimStep>& steps)
      : graph_(graph), steps_(steps), world_(std::max(1, graph.world_size())) {
    vc_.assign(size_t(world_), Clock(size_t(world_), 0));
    pc_.assign(size_t(world_), 0);
    for (const SimStep& s : steps_) {
      tracked_.insert(s.remote_reads.begin(), s.remote_reads.end());
      tracked_.insert(s.remote_writes.begin(), s.remote_writes.end());
    }
  }

  std::vector<ir::Diagnostic> run() {
    simulate();
    for (auto& [steps, race] : races_) diags_.push_back(std::move(race.second));
    for (const auto& [key, queue] : signals_) {
      for (const PendingPut& p : queue) unmatched_put(key, p.step);
    }
    std::sort(diags_.begin(), diags_.end(), [](const auto& a, const auto& b) {
      return std::tie(a.loc.line, a.loc.column, a.message) <
             std::tie(b.loc.line, b.loc.column, b.message);
    });
    if (diags_.size() > kMaxDiagnostics) diags_.resize(kMaxDiagnostics);
    return std::move(diags_);
  }

 private:
  // The group instance of `rank`: its explicit subgroup (Note [explicit groups] in graph.cpp;
  // the verifier refuses ops of a group on a rank in none), else consecutive blocks of the
  // group's size.
  std::vector<int> members(const std::string& group, int rank) const {
    if (const ir::GroupDecl* decl = graph_.find_group(group); decl && !decl->subgroups.empty()) {
      for (const std::vector<int>& sub : decl->subgroups) {
        if (std::find(sub.begin(), sub.end(), rank) != sub.end()) return sub;
      }
      return {rank};
    }
    int size = std::clamp(graph_.group_size(group), 1, world_);
    int first = rank / size * size;
    std::vector<int> m;
    for (int x = first; x < std::min(first + size, world_); ++x) m.push_back(x);
    return m;
  }

  // The world rank of a step's peer on `rank`, or -1 when out of range (the runtime refuses it).
  int resolve_peer(const SimStep& s, int rank) const {
    std::vector<int> m = members(s.group, rank);
    int n = int(m.size());
    int64_t local = std::find(m.begin(), m.end(), rank) - m.begin();
    int64_t p = s.peer_relative ? ir::resolve_rank_relative(s.peer, int(local), n) : s.peer;
    return p >= 0 && p < n ? m[size_t(p)] : -1;
  }

  void tick(int r) { ++vc_[size_t(r)][size_t(r)]; }

  // Note [last accesses]: events come in simulation order, which extends happens-before, so an
  // access can only race with earlier ones; and if the last read (write) of rank y happens before
  // it, so do all of y's earlier ones (program order). Keeping each rank's last read and last
  // write per buffer copy is complete and linear (FastTrack's idea).
  void record(int owner, const Value* buf, int by, bool write, size_t step, int sync) {
    if (!tracked_.count(buf)) return;
    Event e{by, vc_[size_t(by)], step, write, sync};
    BufferState& b = buffers_[{owner, buf}];
    if (b.last_write.empty()) {
      b.last_write.resize(size_t(world_));
      b.last_read.resize(size_t(world_));
    }
    for (int y = 0; y < world_; ++y) {
      if (y == by) continue;
      check(owner, buf, b.last_write[size_t(y)], e);
      if (write) check(owner, buf, b.last_read[size_t(y)], e);
    }
    (write ? b.last_write : b.last_read)[size_t(by)] = std::move(e);
  }

  void check(int owner, const Value* buf, const std::optional<Event>& a, const Event& e) {
    if (!a || (a->sync >= 0 && a->sync == e.sync)) return;
    if (!happens_before(*a, e)) race(owner, buf, *a, e);
  }

  void local_accesses(int r, const SimStep& s, size_t step, int sync) {
    for (const Value* v : s.reads) record(r, v, r, false, step, sync);
    for (const Value* v : s.writes) record(r, v, r, true, step, sync);
  }

  void join_into(Clock& into, const Clock& c) {
    for (size_t i = 0; i < into.size(); ++i) into[i] = std::max(into[i], c[i]);
  }

  void sync_members(const std::vector<int>& m) {
    Clock j(size_t(world_), 0);
    for (int x : m) join_into(j, vc_[size_t(x)]);
    for (int x : m) vc_[size_t(x)] = j;
  }

  bool try_step(int r) {
    size_t step = pc_[size_t(r)];
    if (step >= steps_.size()) return false;
    const SimStep& s = steps_[step];
    switch (s.kind) {
      case SimStep::Kind::sync: {
        std::vector<int> m = members(s.group, r);
        for (int x : m) {
          if (pc_[size_t(x)] != step) return false;
        }
        sync_members(m);
        for (int x : m) {
          tick(x);
          local_accesses(x, s, step, int(step));
        }
        sync_members(m);
        for (int x : m) ++pc_[size_t(x)];
        return true;
      }
      case SimStep::Kind::wait: {
        int from = resolve_peer(s, r);
        if (from >= 0) {
          auto it = signals_.find({s.group, from, r, s.channel});
          if (it == signals_.end() || it->second.empty()) return false;
          join_into(vc_[size_t(r)], it->second.front().clock);
          it->second.pop_front();
        }
        tick(r);
        break;
      }
      case SimStep::Kind::put:
      case SimStep::Kind::get: {
        tick(r);
        local_accesses(r, s, step, -1);
        int peer = resolve_peer(s, r);
        if (peer < 0) break;
        for (const Value* v : s.remote_writes) record(peer, v, r, true, step, -1);
        for (const Value* v : s.remote_reads) record(peer, v, r, false, step, -1);
        if (s.kind == SimStep::Kind::put)
          signals_[{s.group, r, peer, s.channel}].push_back({vc_[size_t(r)], step});
        break;
      }
      default:
        tick(r);
        local_accesses(r, s, step, -1);
    }
    ++pc_[size_t(r)];
    return true;
  }

  void simulate() {
    while (true) {
      bool progress = false;
      for (int r = 0; r < world_; ++r) {
        while (try_step(r)) progress = true;
      }
      if (progress) continue;
      // Stuck: every rank that has not finished waits for a signal nobody sends (syncs cannot
      // block alone: every rank runs the same steps). Report the first, let it go on.
      int stuck = -1;
      for (int r = 0; r < world_ && stuck < 0; ++r) {
        if (pc_[size_t(r)] < steps_.size() &&
            steps_[pc_[size_t(r)]].kind == SimStep::Kind::wait)
          stuck = r;
      }
      if (stuck < 0) return;
      unmatched_wait(stuck, pc_[size_t(stuck)]);
      tick(stuck);
      ++pc_[size_t(stuck)];
    }
  }

  static int line_of(const ir::Node* n) {
    if (!n) return 0;
    if (n->loc().line > 0 || !n->body()) return n->loc().line;
    for (const ir::Node* b : n->body()->nodes()) {
      if (b->loc().line > 0) return b->loc().line;
    }
    return 0;
  }
  static ir::SourceLoc loc_of(const ir::Node* n) {
    if (n && n->loc().line > 0) return n->loc();
    return {line_of(n), 1};
  }
  static std::string at_line(const ir::Node* n) {
    int line = line_of(n);
    return line > 0 ? fmt::format(" (line {})", line) : std::string(" (a compiler-made step)");
  }

  std::string describe(int owner, const Event& e) const {
    const SimStep& s = steps_[e.step];
    std::string run = s.run > 0 ? " in the next run" : "";
    if (s.kind == SimStep::Kind::run_end)
      return fmt::format("the caller's read of rank {}'s results after the run{}", owner, run);
    std::string name = s.node->display_name();
    if (e.by != owner) {
      return fmt::format("rank {}'s {} {} rank {}'s copy{}{}", e.by, name,
                         e.write ? "into" : "from", owner, at_line(s.node), run);
    }
    return fmt::format("rank {}'s {} by {}{}{}", owner, e.write ? "write" : "read", name,
                       at_line(s.node), run);
  }

  void add(ir::SourceLoc loc, std::string message) {
    diags_.push_back({loc, std::move(message)});
  }

  void race(int owner, const Value* buf, const Event& a, const Event& b) {
    const Event& remote = b.by != owner ? b : a;
    const Event& local = b.by != owner ? a : b;
    const ir::Node* rn = steps_[remote.step].node;
    const ir::Node* ln = steps_[local.step].node;
    // One diagnostic per pair of steps: the one of the lowest ranks, whatever order found them.
    const std::tuple<int, int, int> ranks{owner, local.by, remote.by};
    auto [it, fresh] = races_.try_emplace({std::min(rn, ln), std::max(rn, ln)}, ranks,
                                          ir::Diagnostic{});
    if (!fresh && it->second.first <= ranks) return;
    it->second.first = ranks;
    const std::string& group = buf->layout().group.empty() ? steps_[remote.step].group
                                                           : buf->layout().group;
    it->second.second = ir::Diagnostic{
        loc_of(line_of(rn) > 0 ? rn : ln),
        fmt::format("race on '{}' ({}) of rank {}: {} and {} are not ordered by any barrier, "
                    "collective or signal; add a barrier of group '{}' between them, use a second "
                    "buffer (double buffering), or send a credit signal back to the writer (a "
                    "put_signal from rank {} after its access, waited for by rank {} before it "
                    "writes)",
                    buf->name(), buf->layout().str(), owner, describe(owner, a),
                    describe(owner, b), group, local.by, remote.by)};
  }

  static bool happens_before(const Event& a, const Event& b) {
    return a.clock[size_t(a.by)] <= b.clock[size_t(a.by)];
  }

  void unmatched_wait(int rank, size_t step) {
    const SimStep& s = steps_[step];
    if (!reported_.insert({s.node, nullptr}).second) return;
    add(loc_of(s.node),
        fmt::format("{} on rank {} waits for a signal from rank {} on channel {} of group '{}' "
                    "that no put_signal sends: it would wait forever (check the peer and the "
                    "channel of the matching put_signal)",
                    s.node->display_name(), rank, resolve_peer(s, rank), s.channel, s.group));
  }

  void unmatched_put(const SignalKey& k, size_t step) {
    const SimStep& s = steps_[step];
    if (!reported_.insert({s.node, nullptr}).second) return;
    add(loc_of(s.node),
        fmt::format("{} from rank {} to rank {} on channel {} of group '{}' is never waited for: "
                    "no wait_signal on rank {} for rank {} on channel {} consumes its signal, so "
                    "nothing orders its data before rank {}'s reads and the next put on that "
                    "channel blocks",
                    s.node->display_name(), k.from, k.to, k.channel, k.group, k.to, k.from,
                    k.channel, k.to));
  }

  const ir::Graph& graph_;
  const std::vector<SimStep>& steps_;
  int world_;
  std::vector<Clock> vc_;
  std::vector<size_t> pc_;
  std::set<const Value*> tracked_;  // buffers some peer reads or writes
  std::map<std::pair<int, const Value*>, BufferState, ByName> buffers_;
  std::map<SignalKey, std::deque<PendingPut>> signals_;
  std::set<std::pair<const ir::Node*, const ir::Node*>> reported_;  // unmatched signals
  // Races by pair of steps: (owner, local rank, remote rank) of the one reported.
  std::map<std::pair<const ir::Node*, const ir::Node*>,
           std::pair<std::tuple<int, int, int>, ir::Diagnostic>>
      races_;
  std::vector<ir::Diagnostic> diags_;
};

}  // namespace

std::vector<ir::Diagnostic> simulate_races(const ir::Graph& graph,
                                           const std::vector<SimStep>& steps) {
  return Simulator(graph, steps).run();
}

}  // namespace symmflow::passes
