// Runtime: groups by name and the current rank of a thread. new_group validates that every member
// passes the same name and rank list (an all-gather among the members) and refuses bad lists.
#include "symmflow/runtime/runtime.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "symmflow/core/error.hpp"
#include "symmflow/ops/group_size.hpp"

namespace symmflow {

namespace {
thread_local Runtime* current_runtime = nullptr;
}

const char* transport_name(Transport t) {
  switch (t) {
    case Transport::threads: return "threads";
    case Transport::mpi: return "mpi";
    case Transport::store: return "store";
  }
  return "unknown";
}

// Note [groups of members only]: a rank meets only the members of the groups it uses, when it
// first uses them. On the store transport, whose processes are started by anything and may call
// symmflow late or never, the world group too is made on its first use (Runtime::group("world"),
// a collective of every rank), and a peer's hello is read when the peer is first met
// (store_bootstrap.cpp); until then a subgroup's members go on without waiting for a rank
// outside it (issue 38: ranks 0 and 1 of a 4-rank world compiled a group of their own first and
// timed out in init_store waiting for ranks 2 and 3, which were doing other work). Threads and
// MPI start every rank together (run_threads, mpirun's MPI_Init), so their world is made at once.
Runtime::Runtime(std::unique_ptr<Bootstrap> bootstrap) : bootstrap_(std::move(bootstrap)) {
  if (bootstrap_->transport() != Transport::store) group("world");
}

Runtime::~Runtime() {
  // A runtime torn down while an exception unwinds belongs to a rank that failed: it poisons the
  // world instead of saying it finished (Note [peers that left] in group.hpp).
  if (!left_) leave(std::uncaught_exceptions() == 0);
}

void Runtime::abort(const std::string& why) {
  if (is_shut_down()) return;  // it left already: its words reach nobody
  if (!aborted_) aborted_ = why;
  bootstrap_->poison(why);
}

void Runtime::shut_down() {
  if (is_shut_down()) return;
  leave(std::uncaught_exceptions() == 0);
  for (auto& [name, g] : groups_) g->mark_shut_down();
  bootstrap_->depart();
  shut_down_.store(true, std::memory_order_release);
}

void Runtime::check_running(std::string_view op) const {
  SF_CHECK(!is_shut_down(),
           "{}: symmflow has shut down (rank {} left its world at exit or by shutdown); no call "
           "runs after it",
           op, rank());
}

void Runtime::leave(bool finished) {
  if (left_) return;
  left_ = true;
  // A rank that aborted (an uncaught Python exception too: its excepthook aborts) did not finish
  // cleanly: its groups say it failed, with its words (Note [poisoned groups]), so a peer
  // waiting for it names the failure and not "finished", even before its rate-limited look at
  // the world's poison. (Its own record: at exit the store may be gone already.)
  for (auto& [name, g] : groups_) {
    if (aborted_) {
      g->poison(Error(ErrorCode::PeerFailure, *aborted_));
    } else if (finished) {
      g->mark_left(Group::kLeftFinished);
    }
    g->mark_destroyed();
  }
}

Runtime* Runtime::current_or_null() {
  return current_runtime;
}

Runtime& Runtime::current() {
  SF_CHECK(current_runtime,
           "no symmflow rank on this thread: run inside symmflow::run_threads(...) or after "
           "symmflow::init_mpi()");
  return *current_runtime;
}

std::shared_ptr<Group> Runtime::new_group(const std::string& name, std::vector<int> ranks) {
  check_running("new_group");
  // Note [poisoned groups]: an abort or a failed rank ends the world, on every transport (the
  // store's allgather would otherwise meet the ranks that are left); recovery is a new world.
  if (std::optional<RankFailure> w = bootstrap_->failure()) {
    throw_error(ErrorCode::PeerFailure,
                "new_group '{}': rank {} failed ({}), so the world is poisoned and no group of it "
                "can be made; recovery is a new world",
                name, w->rank, w->what);
  }
  SF_CHECK(!name.empty(), "new_group: empty group name");
  SF_CHECK(!has_group(name), "new_group: group '{}' already exists on rank {}", name, rank());
  SF_CHECK(!ranks.empty(), "new_group '{}': no ranks", name);
  std::set<int> seen;
  for (int r : ranks) {
    SF_CHECK(r >= 0 && r < world_size(), "new_group '{}': rank {} is outside the world of {} ranks",
             name, r, world_size());
    SF_CHECK(seen.insert(r).second, "new_group '{}': rank {} listed twice", name, r);
  }
  SF_CHECK(seen.count(rank()), "new_group '{}': rank {} calls it but is not a member ({})", name,
           rank(), fmt::join(ranks, ", "));
  std::vector<int> sorted(seen.begin(), seen.end());
  std::string mine = fmt::format("{}|{}", name, fmt::join(ranks, ","));
  std::vector<std::string> all = bootstrap_->allgather(sorted, "new_group", mine, "new_group");
  for (size_t i = 0; i < all.size(); ++i) {
    SF_CHECK(all[i] == mine, "new_group: rank {} asked for '{}' but rank {} for '{}'", rank(), mine,
             sorted[i], all[i]);
  }
  auto g = std::make_shared<Group>(bootstrap_.get(), name, std::move(ranks));
  groups_.emplace(name, g);
  return g;
}

bool Runtime::has_group(std::string_view name) const {
  return name == "world" || groups_.find(name) != groups_.end();
}

const std::shared_ptr<Group>& Runtime::group(std::string_view name) const {
  if (is_shut_down()) check_running(fmt::format("group '{}'", name));
  auto it = groups_.find(name);
  if (it == groups_.end() && name == "world") {  // Note [groups of members only]
    check_running("group 'world'");
    std::vector<int> all(static_cast<size_t>(world_size()));
    for (int r = 0; r < world_size(); ++r) all[size_t(r)] = r;
    it = groups_.emplace("world", std::make_shared<Group>(bootstrap_.get(), "world", all)).first;
  }
  if (it == groups_.end()) {
    std::set<std::string> known{"world"};
    for (const auto& [n, g] : groups_) known.insert(n);
    invalid_usage("unknown group '{}' (known: {})", name, fmt::join(known, ", "));
  }
  return it->second;
}

void Runtime::destroy_group(std::string_view name) {
  check_running("destroy_group");
  SF_CHECK(name != "world", "destroy_group: the world group cannot be destroyed");
  auto it = groups_.find(name);
  SF_CHECK(it != groups_.end(), "destroy_group: unknown group '{}'", name);
  it->second->mark_destroyed();
  it->second->mark_left(Group::kLeftDestroyed);
  groups_.erase(it);
}

RuntimeScope::RuntimeScope(Runtime& rt)
    : previous_(current_runtime),
      groups_(std::make_unique<ScopedGroupSizeResolver>(
          [&rt](std::string_view name) -> std::optional<int64_t> {
            if (!rt.has_group(name)) return std::nullopt;
            if (name == "world") return rt.world_size();  // without making it
            return rt.group(name)->size();
          })) {
  current_runtime = &rt;
}
RuntimeScope::~RuntimeScope() {
  current_runtime = previous_;
}

}  // namespace symmflow
