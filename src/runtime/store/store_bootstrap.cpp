// The `store` transport's Bootstrap (contract in store_bootstrap.hpp).
//
// Note [dead peers]: a peer killed with SIGKILL cannot poison the world, and its peers would wait
// for it until the timeout. So every rank opens a pidfd (pidfd_open) on the process of each peer
// of its host as soon as the peer said hello (it is alive then, and the pidfd pins that very
// process: no pid reuse); the pidfd polls readable once the process has ended, zombie or reaped.
// A peer whose process ended is dead unless it set its exit key first (it finished cleanly and
// may leave before its peers do). Where pidfd_open is missing (Linux < 5.3) kill(pid, 0) and the
// state in /proc/<pid>/stat stand in, with the small risk of a reused pid. "Same host" means the
// same host name and pid namespace; ranks elsewhere are covered by the timeout, or by the poison
// key that a rank of their host writes on the dead rank's behalf.
#include "store_bootstrap.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "host_memory.hpp"
#include "runtime/futex.hpp"
#include "runtime/rendezvous.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow {

// Note [retrying a failed join]: join/<rank> counts the processes that claimed the rank, so a
// second claim is refused as a duplicate (or a store left from an earlier world). A process whose
// first init_store failed after its claim (its hello or a pidfd failed: "Too many open files")
// and that retries would read 2 and be refused forever. So a process remembers the count each
// of its failed attempts got, per store, prefix and rank: a claim whose count is one more than
// its own last failed one is its retry, and goes on (its hello is written again).
//
// Note [forked children]: a child forked from a rank inherits the runtime, the atexit handlers,
// the terminate handler and Python's excepthook. If it used them, a child that merely exits
// would tell the peers its parent's rank finished, and one that raised would poison the world in
// the parent's name. The bootstrap remembers the pid that joined; in any other process it neither
// poisons nor leaves the world, and its exit handler does nothing.

namespace {

std::mutex& failed_joins_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, int64_t>& failed_joins() {  // Note [retrying a failed join]
  static auto* m = new std::map<std::string, int64_t>();
  return *m;
}

using Millis = std::chrono::milliseconds;
constexpr Millis kSlice{20};

std::string machine_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name) != 0) return "unknown-host";
  return name;
}

// Host name + pid namespace: processes with the same key can see each other's pids.
std::string host_key() {
  char ns[128] = {};
  ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  return machine_name() + "|" + (n > 0 ? std::string(ns, size_t(n)) : std::string("?"));
}

int open_pidfd(int pid) {
#ifdef SYS_pidfd_open
  return int(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

// Whether `pid` has ended (fallback without a pidfd): gone, or a zombie.
bool pid_gone(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() &&
         (line[paren + 2] == 'Z' || line[paren + 2] == 'X');
}

}  // namespace

uint64_t member_hash(const std::vector<int>& members) {
  uint64_t h = 1469598103934665603ull;
  for (int m : members)
    for (int i = 0; i < 4; ++i) h = (h ^ ((uint32_t(m) >> (8 * i)) & 0xff)) * 1099511628211ull;
  return h;
}

namespace {

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

StoreBootstrap::StoreBootstrap(const StoreOptions& o)
    : store_(o.store),
      prefix_(o.prefix),
      rank_(o.rank),
      size_(o.world_size),
      timeout_s_(o.timeout_s > 0 ? o.timeout_s : tunables().timeout_s) {
  SF_CHECK(store_, "init_store: no store given");
  SF_CHECK(size_ >= 1 && size_ <= 65536, "init_store: world size {} out of range [1, 65536]",
           size_);
  SF_CHECK(rank_ >= 0 && rank_ < size_, "init_store: rank {} out of range for world size {}",
           rank_, size_);
  SF_CHECK(!prefix_.empty(), "init_store: empty key prefix");
  owner_pid_ = ::getpid();
  const std::string attempt = attempt_key();
  try {
    join();
  } catch (...) {
    if (joined_ > 0) {  // it counted itself in: a retry may follow
      std::lock_guard lock(failed_joins_mutex());
      failed_joins()[attempt] = joined_;
    }
    throw;
  }
}

StoreBootstrap::~StoreBootstrap() {
  depart();
  for (Peer& p : peers_)
    if (p.pidfd >= 0) ::close(p.pidfd);
}

bool StoreBootstrap::in_owner() const { return ::getpid() == owner_pid_; }

std::string StoreBootstrap::attempt_key() const {
  return fmt::format("{}\n{}\n{}", store_->describe(), prefix_, rank_);
}

void StoreBootstrap::depart() {
  if (departed_ || !in_owner()) return;  // Note [forked children]
  departed_ = true;
  try {
    store_->set(key(fmt::format("exit/{}", rank_)), "1");
    auto* tcp = dynamic_cast<TcpStore*>(store_.get());
    if (tcp && tcp->serving()) wait_for_exits();
  } catch (...) {
    // Leaving anyway: a peer that still needs the store learns it from the lost connection.
  }
}

void StoreBootstrap::join() {
  int64_t joins = store_->add(key(fmt::format("join/{}", rank_)), 1);
  int64_t retried_after = 0;  // Note [retrying a failed join]
  {
    std::lock_guard lock(failed_joins_mutex());
    auto it = failed_joins().find(attempt_key());
    if (it != failed_joins().end()) retried_after = it->second;
  }
  if (joins != 1 && joins != retried_after + 1) {
    // Two processes hold this rank: whichever joined first must not go on with the world either.
    std::string why = fmt::format(
        "init_store: rank {} joined the world '{}' in {} {} times: two processes were given the "
        "same rank, or the store still holds an earlier world (use a fresh directory or port, or "
        "another prefix)",
        rank_, prefix_, store_->describe(), joins);
    publish_poison(rank_, why);
    invalid_usage("{}", why);
  }
  joined_ = joins;
  std::string mask;
  for (uint64_t w : cpu_mask()) mask += fmt::format("{:x},", w);
  // Note [hosts]: a simulated host is a host of its own (no shared memory, no pidfds across it).
  std::string name = machine_name(), hkey = host_key();
  if (std::optional<int> id = simulated_host_id()) {
    name = fmt::format("host {} (SYMMFLOW_HOST_ID)", *id);
    hkey = fmt::format("sim{}|{}", *id, hkey);
  }
  const std::string hello = fmt::format("{}\n{}\n{}\n{}\n{}", size_, ::getpid(), name, hkey, mask);
  store_->set(key(fmt::format("hello/{}", rank_)), hello);
  // Note [groups of members only] (runtime.cpp): the others' hellos are read when this rank
  // first meets them (learn), not here.
  std::lock_guard lock(failure_mutex_);
  peers_.assign(size_t(size_), Peer{});
  local_ranks_ = 0;
  local_cpus_ = 0;
  add_peer(rank_, hello);
}

// A hello: "<world size>\n<pid>\n<host>\n<host key>\n<cpu mask words>". Caller holds
// failure_mutex_.
void StoreBootstrap::add_peer(int r, const std::string& hello) {
  std::vector<std::string> f = split_lines(hello);
  SF_CHECK(f.size() == 5, "init_store: rank {} published a malformed hello in {}", r,
           store_->describe());
  Peer& p = peers_[size_t(r)];
  p.known = true;
  p.pid = std::atoi(f[1].c_str());
  p.host = f[2];
  p.host_key = f[3];
  auto id = std::find(host_keys_.begin(), host_keys_.end(), p.host_key);
  p.host_id = int(id - host_keys_.begin());
  if (id == host_keys_.end()) host_keys_.push_back(p.host_key);
  if (p.host_key != peers_[size_t(rank_)].host_key && r != rank_) return;
  local_ranks_.store(local_ranks_.load() + 1);
  std::istringstream words(f[4]);
  size_t i = 0;
  for (std::string w; std::getline(words, w, ',') && i < cpus_.size(); ++i)
    cpus_[i] |= std::strtoull(w.c_str(), nullptr, 16);
  local_cpus_.store(std::max(1, cpu_count(cpus_)));
  if (r != rank_ && p.pid != ::getpid()) p.pidfd = open_pidfd(p.pid);
}

// Note [groups of members only]: waits (bounded, as any wait) for the hellos of `ranks` not met
// yet and reads them; a rank whose world size differs makes this raise, listing each one's.
void StoreBootstrap::learn(const std::vector<int>& ranks, std::string_view op) {
  std::vector<int> missing;
  std::vector<std::string> keys;
  {
    std::lock_guard lock(failure_mutex_);
    for (int r : ranks) {
      SF_CHECK(r >= 0 && r < size_, "{}: rank {} is outside the world of {} ranks", op, r, size_);
      if (peers_[size_t(r)].known) continue;
      missing.push_back(r);
      keys.push_back(key(fmt::format("hello/{}", r)));
    }
  }
  if (missing.empty()) return;
  await(keys, missing, op);
  std::vector<std::string> hellos;
  bool same_size = true;
  for (size_t i = 0; i < missing.size(); ++i) {
    hellos.push_back(store_->get_value(keys[i], Millis(0), op));
    same_size = same_size && hellos.back().substr(0, hellos.back().find('\n')) ==
                                 std::to_string(size_);
  }
  if (!same_size) {
    std::map<int, std::string> sizes{{rank_, std::to_string(size_)}};
    for (size_t i = 0; i < missing.size(); ++i)
      sizes[missing[i]] = hellos[i].substr(0, hellos[i].find('\n'));
    std::string all;
    for (const auto& [r, n] : sizes) all += fmt::format("\n  rank {}: world size {}", r, n);
    invalid_usage("{}: the ranks of world '{}' disagree on the world size:{}", op, prefix_, all);
  }
  std::lock_guard lock(failure_mutex_);
  for (size_t i = 0; i < missing.size(); ++i)
    if (!peers_[size_t(missing[i])].known) add_peer(missing[i], hellos[i]);
}

int StoreBootstrap::host_of(int rank) const {
  const_cast<StoreBootstrap*>(this)->learn({rank}, "host_of");
  std::lock_guard lock(failure_mutex_);
  return peers_[size_t(rank)].host_id;
}

bool StoreBootstrap::met_everyone() const {
  std::lock_guard lock(failure_mutex_);
  for (const Peer& p : peers_)
    if (!p.known) return false;
  return true;
}

std::string StoreBootstrap::host_name(int rank) const {
  const_cast<StoreBootstrap*>(this)->learn({rank}, "host_name");
  std::lock_guard lock(failure_mutex_);
  return peers_[size_t(rank)].host;
}

bool StoreBootstrap::peer_died(int r) const {
  if (size_t(r) >= peers_.size() || r == rank_) return false;
  Peer& p = peers_[size_t(r)];
  if (!p.known || p.exited || p.host_key != peers_[size_t(rank_)].host_key || p.pid == ::getpid())
    return false;
  bool ended = false;
  if (p.pidfd >= 0) {
    pollfd pfd{p.pidfd, POLLIN, 0};
    ended = ::poll(&pfd, 1, 0) > 0;
  } else {
    ended = pid_gone(p.pid);
  }
  if (!ended) return false;
  if (!p.swept) {  // its unpublished or unmapped blocks (Note [store shared memory])
    sweep_host_blocks(p.pid);
    p.swept = true;
  }
  try {
    if (store_->get(key(fmt::format("exit/{}", r)), Millis(0))) {
      p.exited = true;
      return false;
    }
  } catch (const Error&) {
    // The store is unreachable (perhaps that process served it): it did not exit cleanly.
  }
  return true;
}

void StoreBootstrap::publish_poison(int rank, const std::string& why) const {
  try {
    // The first claim wins. A later claimer whose winner never wrote (the claim was bumped by a
    // process without the secret: Note [sealed store values]) writes it itself; the winner's
    // write follows its claim at once, so a short wait tells the two apart.
    if (store_->add(key("poison_claim"), 1) == 1 || !store_->get(key("poison"), Millis(200)))
      store_->set(key("poison"), fmt::format("{}\n{}", rank, why));
  } catch (const Error&) {
    // The store is gone: ranks of this host still see dead peers through their pidfds.
  }
}

void StoreBootstrap::poison(const std::string& why) {
  if (!in_owner()) return;  // Note [forked children]
  publish_poison(rank_, why);
  std::lock_guard lock(failure_mutex_);
  next_check_ = {};
}

std::optional<RankFailure> StoreBootstrap::failure() const {
  std::lock_guard lock(failure_mutex_);
  if (failure_) return failure_;
  auto now = std::chrono::steady_clock::now();
  if (now < next_check_) return std::nullopt;
  next_check_ = now + Millis(tunables().store_check_ms);
  auto poisoned = [&]() -> bool {
    try {
      std::optional<std::string> v = store_->get(key("poison"), Millis(0));
      if (!v) return false;
      size_t nl = v->find('\n');
      failure_ = RankFailure{std::atoi(v->substr(0, nl).c_str()),
                             nl == std::string::npos ? "" : v->substr(nl + 1)};
      return true;
    } catch (const Error&) {
      return false;  // waits on the store raise its error themselves
    }
  };
  if (poisoned()) return failure_;
  for (int r = 0; r < int(peers_.size()); ++r) {
    if (!peer_died(r)) continue;
    // It may have poisoned just before it ended: its own words win.
    if (poisoned()) return failure_;
    const Peer& p = peers_[size_t(r)];
    std::string why = fmt::format(
        "its process {} on {} ended without reporting an error: killed by a signal or crashed",
        p.pid, p.host);
    failure_ = RankFailure{r, why};
    publish_poison(r, why);
    return failure_;
  }
  return std::nullopt;
}

std::optional<RankFailure> StoreBootstrap::failure_now() const {
  {
    std::lock_guard lock(failure_mutex_);
    next_check_ = {};
  }
  return failure();
}

// Note [waits for a rank that left]: a rank sets its exit key when it leaves cleanly, after
// every key it set before, and the store orders one client's writes. So once the exit key is
// there, a key of that rank that is still absent never comes: the wait fails at once (checked
// every slice, one read) instead of at the timeout. The key is read again after the exit key, as
// it may have come in between.
bool StoreBootstrap::finished_without(int r, const std::string& key_of_r) {
  if (r == rank_) return false;
  try {
    return store_->get(key(fmt::format("exit/{}", r)), Millis(0)).has_value() &&
           !store_->get(key_of_r, Millis(0)).has_value();
  } catch (const Error&) {
    return false;  // an unreachable store is the caller's error to report
  }
}

void StoreBootstrap::await(const std::vector<std::string>& keys, const std::vector<int>& ranks,
                           std::string_view op) {
  auto start = std::chrono::steady_clock::now();
  auto limit = std::chrono::duration<double>(timeout_s_);
  auto peer_failure = [&](size_t i) {
    if (std::optional<RankFailure> f = failure(); f && f->rank != rank_)
      throw_error(ErrorCode::PeerFailure,
                  "{}: rank {} failed ({}) while rank {} waited for rank {}", op, f->rank,
                  f->what, rank_, ranks[i]);
  };
  size_t i = 0;
  while (i < keys.size()) {
    auto left =
        std::chrono::duration_cast<Millis>(limit - (std::chrono::steady_clock::now() - start));
    bool got = false;
    try {
      got = store_->wait({keys[i]}, std::clamp(left, Millis(0), kSlice));
    } catch (const Error&) {
      // A lost store is often a dead peer that served it: name the peer if so.
      {
        std::lock_guard lock(failure_mutex_);
        next_check_ = {};
      }
      peer_failure(i);
      throw;
    }
    if (got) {
      ++i;
      continue;
    }
    peer_failure(i);
    if (finished_without(ranks[i], keys[i])) {
      if (std::optional<RankFailure> f = failure_now(); f && f->rank != rank_)
        peer_failure(i);  // Note [the cause before the departure] in wait.cpp
      throw_error(ErrorCode::PeerFailure,
                  "{}: rank {} has finished (it left the world cleanly) while rank {} waited for "
                  "it",
                  op, ranks[i], rank_);
    }
    if (std::chrono::steady_clock::now() - start > limit)
      throw_error(ErrorCode::Timeout, "{}: timed out after {} s on rank {} waiting for rank {}", op,
                  timeout_s_, rank_, ranks[i]);
  }
}

std::vector<std::string> StoreBootstrap::allgather(const std::vector<int>& members,
                                                   const std::string& key_text, std::string data,
                                                   std::string_view op) {
  std::lock_guard lock(mutex_);
  auto me = std::find(members.begin(), members.end(), rank_);
  SF_CHECK(me != members.end(), "{}: rank {} is not among the members {}", op, rank_,
           fmt::join(members, ", "));
  learn(members, op);  // Note [groups of members only]
  uint64_t seq = seq_[members]++;
  std::string slot = fmt::format("ag/{:016x}-{}/{}", member_hash(members), members.size(), seq);
  std::string value;
  uint32_t key_len = uint32_t(key_text.size());
  value.append(reinterpret_cast<const char*>(&key_len), 4).append(key_text).append(data);
  store_->set(key(fmt::format("{}/{}", slot, rank_)), value);
  std::vector<std::string> keys;
  for (int m : members) keys.push_back(key(fmt::format("{}/{}", slot, m)));
  await(keys, members, op);
  std::vector<std::string> out(members.size()), theirs(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    std::string v = store_->get_value(keys[i], Millis(0), op);
    uint32_t n = 0;
    SF_CHECK(v.size() >= 4, "{}: malformed exchange from rank {}", op, members[i]);
    std::memcpy(&n, v.data(), 4);
    SF_CHECK(v.size() >= 4 + size_t(n), "{}: malformed exchange from rank {}", op, members[i]);
    theirs[i] = v.substr(4, n);
    out[i] = v.substr(4 + n);
  }
  check_same_collective(theirs, key_text, members, op);
  return out;
}

std::shared_ptr<SharedRegion> StoreBootstrap::allocate_shared(const std::vector<int>& members,
                                                              const std::string& key_text,
                                                              size_t bytes, std::string_view op) {
  std::lock_guard lock(mutex_);
  // Every member decides this from the same data, so all raise together (no hang).
  learn(members, op);
  for (int m : members)
    if (host_of(m) != host_of(members[0])) refuse_spanning_allocation(*this, members, op);
  std::vector<std::string> sizes =
      allgather(members, "allocate:" + key_text, fmt::format("{}", bytes), op);
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == sizes[0]) continue;
    std::string all;
    for (size_t j = 0; j < sizes.size(); ++j)
      all += fmt::format("\n  rank {}: {} bytes", members[j], sizes[j]);
    invalid_usage("{}: shared allocation '{}' differs in size across ranks:{}", op, key_text, all);
  }
  // Note [store shared memory] (host_memory.hpp): create, publish names, map, agree, unlink.
  size_t index = size_t(std::find(members.begin(), members.end(), rank_) - members.begin());
  std::vector<HostBlock> blocks(members.size());
  // Each publishes its block's name, or why it has none (after a '!'): all raise alike.
  std::string created;
  try {
    blocks[index] = HostBlock::create(bytes);
    created = blocks[index].name();
  } catch (const Error& e) {
    created = std::string("!") + e.what();
  }
  std::vector<std::string> names = allgather(members, "names:" + key_text, created, op);
  std::string failed;
  for (size_t i = 0; i < members.size(); ++i)
    if (names[i].empty() || names[i][0] == '!')
      failed += fmt::format("\n  rank {}: {}", members[i],
                            names[i].empty() ? "no name" : names[i].substr(1));
  if (!failed.empty())
    throw_error(ErrorCode::System,
                "{}: host shared memory '{}' ({} bytes per rank) could not be created on every "
                "rank:{}",
                op, key_text, bytes, failed);
  std::string status;
  for (size_t i = 0; i < members.size() && status.empty(); ++i) {
    if (i == index) continue;
    try {
      blocks[i] = HostBlock::open(names[i], bytes);
    } catch (const Error& e) {
      status = fmt::format("cannot map rank {}'s block: {}", members[i], e.what());
    }
  }
  std::vector<std::string> statuses = allgather(members, "mapped:" + key_text, status, op);
  blocks[index].unlink();  // every member mapped it, or gave up: the name is not needed
  for (size_t i = 0; i < members.size(); ++i)
    if (!statuses[i].empty()) failed += fmt::format("\n  rank {}: {}", members[i], statuses[i]);
  if (!failed.empty())
    throw_error(ErrorCode::System,
                "{}: host shared memory '{}' could not be mapped by every rank:{}", op, key_text,
                failed);
  return std::make_shared<HostRegion>(std::move(blocks), index, bytes);
}

void StoreBootstrap::wait_for_exits() noexcept {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  std::vector<bool> done(static_cast<size_t>(size_), false);
  done[size_t(rank_)] = true;
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    for (int r = 0; r < size_; ++r) {
      if (done[size_t(r)]) continue;
      try {
        std::lock_guard lock(failure_mutex_);
        // A rank that never joined (no hello: it never used symmflow, Note [groups of members
        // only]) needs no server.
        done[size_t(r)] = store_->get(key(fmt::format("exit/{}", r)), Millis(0)) ||
                          peer_died(r) ||
                          !store_->get(key(fmt::format("hello/{}", r)), Millis(0));
      } catch (...) {
        done[size_t(r)] = true;
      }
      all = all && done[size_t(r)];
    }
    if (all) return;
    std::this_thread::sleep_for(Millis(5));
  }
}

std::unique_ptr<Bootstrap> make_store_bootstrap(const StoreOptions& options) {
  return std::make_unique<StoreBootstrap>(options);
}

}  // namespace symmflow
