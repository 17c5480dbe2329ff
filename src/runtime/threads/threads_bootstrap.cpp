// The `threads` transport: N ranks as threads of one process.
//
// Exchanges: every call of allgather on a member set gets that set's next sequence number on the
// calling rank, so ranks that call the same collectives in the same order meet in the same slot;
// each slot also records the caller's key, and a rank that arrives with another key (a different
// collective, or allocations in a different order) makes every member raise InvalidUsage naming
// what each rank was doing, instead of exchanging the wrong data.
//
// Note [freeing shared memory]: on threads, a SharedRegion's blocks are owned jointly by every
// member's region object, so memory lives until the last rank drops it; a late put_signal from a
// peer never writes into freed memory.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/futex.hpp"
#include "runtime/rendezvous.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/runtime/tunables.hpp"
#include "symmflow/runtime/wait.hpp"

namespace symmflow {

namespace {

struct Exchange {
  explicit Exchange(size_t n) : data(n), keys(n), present(n, false) {}
  std::vector<std::string> data, keys;
  std::vector<bool> present;
  size_t arrived = 0, read = 0;
};

struct Block {
  explicit Block(size_t n) : bytes(n) {
    size_t rounded = (std::max<size_t>(n, 1) + 63) / 64 * 64;
    ptr = std::aligned_alloc(64, rounded);
    if (!ptr) throw_error(ErrorCode::System, "out of host memory allocating {} bytes", n);
    std::memset(ptr, 0, rounded);
  }
  ~Block() { std::free(ptr); }
  void* ptr;
  size_t bytes;
};

class ThreadWorld {
 public:
  ThreadWorld(int size, double timeout_s, std::vector<int> hosts)
      : finished(std::make_unique<std::atomic<bool>[]>(size_t(size))),
        size_(size),
        timeout_s_(timeout_s),
        hosts_(std::move(hosts)) {}
  int size() const { return size_; }
  // Note [hosts]: the dense host number of each rank (all 0 without simulated hosts).
  const std::vector<int>& hosts() const { return hosts_; }
  double timeout_s() const { return timeout_s_; }

  // Set once rank r's function returned (Note [peers that left] in group.hpp).
  std::unique_ptr<std::atomic<bool>[]> finished;

  std::mutex mutex;
  std::map<std::string, std::shared_ptr<Exchange>> exchanges;
  std::map<std::string, std::vector<std::shared_ptr<Block>>> blocks;  // in-flight allocations
  std::atomic<int> failed_rank{-1};
  std::string failure_what;

 private:
  int size_;
  double timeout_s_;
  std::vector<int> hosts_;
};

class ThreadRegion : public SharedRegion {
 public:
  ThreadRegion(std::vector<std::shared_ptr<Block>> blocks, size_t mine)
      : blocks_(std::move(blocks)), mine_(mine) {}
  void* local() const override { return blocks_[mine_]->ptr; }
  void* peer(int i) const override { return blocks_.at(size_t(i))->ptr; }
  size_t bytes() const override { return blocks_[mine_]->bytes; }

 private:
  std::vector<std::shared_ptr<Block>> blocks_;
  size_t mine_;
};

class ThreadsBootstrap : public Bootstrap {
 public:
  ThreadsBootstrap(std::shared_ptr<ThreadWorld> world, int rank)
      : world_(std::move(world)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_->size(); }
  Transport transport() const override { return Transport::threads; }
  int local_ranks() const override {
    return int(std::count(world_->hosts().begin(), world_->hosts().end(), host_of(rank_)));
  }
  int host_of(int rank) const override { return world_->hosts().at(size_t(rank)); }
  std::string host_name(int rank) const override {
    return fmt::format("host {} (ThreadsOptions::hosts)", host_of(rank));
  }
  int local_cpus() const override { return usable_cpus(); }
  double timeout_s() const override { return world_->timeout_s(); }

  std::vector<std::string> allgather(const std::vector<int>& members, const std::string& key,
                                     std::string data, std::string_view op) override;
  std::shared_ptr<SharedRegion> allocate_shared(const std::vector<int>& members,
                                                const std::string& key, size_t bytes,
                                                std::string_view op) override;
  void poison(const std::string& why) override {
    std::lock_guard lock(world_->mutex);
    int expected = -1;
    if (world_->failed_rank.compare_exchange_strong(expected, rank_)) world_->failure_what = why;
  }
  std::optional<RankFailure> failure() const override {
    int r = world_->failed_rank.load(std::memory_order_acquire);
    if (r < 0) return std::nullopt;
    std::lock_guard lock(world_->mutex);
    return RankFailure{r, world_->failure_what};
  }
  bool finished(int rank) const override {
    return rank >= 0 && rank < world_->size() &&
           world_->finished[size_t(rank)].load(std::memory_order_acquire);
  }

 private:
  std::shared_ptr<ThreadWorld> world_;
  int rank_;
  std::map<std::vector<int>, uint64_t> seq_;  // per member set
};

std::vector<std::string> ThreadsBootstrap::allgather(const std::vector<int>& members,
                                                     const std::string& key, std::string data,
                                                     std::string_view op) {
  auto me = std::find(members.begin(), members.end(), rank_);
  SF_CHECK(me != members.end(), "{}: rank {} is not among the members {}", op, rank_,
           fmt::join(members, ", "));
  size_t index = size_t(me - members.begin());
  std::string slot = fmt::format("{}#{}", fmt::join(members, ","), seq_[members]++);
  std::shared_ptr<Exchange> ex;
  {
    std::lock_guard lock(world_->mutex);
    auto& e = world_->exchanges[slot];
    if (!e) e = std::make_shared<Exchange>(members.size());
    ex = e;
    ex->data[index] = std::move(data);
    ex->keys[index] = key;
    ex->present[index] = true;
    ++ex->arrived;
  }
  Waiter waiter(this, {op, "", rank_, -1});
  for (;;) {
    {
      std::lock_guard lock(world_->mutex);
      if (ex->arrived == members.size()) break;
      for (size_t i = 0; i < members.size(); ++i) {
        if (!ex->present[i]) {
          waiter.set_peer(members[i]);
          break;
        }
      }
    }
    waiter.pause();
  }
  std::vector<std::string> out, keys;
  {
    std::lock_guard lock(world_->mutex);
    out = ex->data;
    keys = ex->keys;
    if (++ex->read == members.size()) world_->exchanges.erase(slot);
  }
  check_same_collective(keys, key, members, op);
  return out;
}

std::shared_ptr<SharedRegion> ThreadsBootstrap::allocate_shared(const std::vector<int>& members,
                                                                const std::string& key,
                                                                size_t bytes, std::string_view op) {
  for (int m : members)
    if (host_of(m) != host_of(members[0])) refuse_spanning_allocation(*this, members, op);
  auto block = std::make_shared<Block>(bytes);
  std::string slot = fmt::format("{}|{}", fmt::join(members, ","), key);
  size_t index = size_t(std::find(members.begin(), members.end(), rank_) - members.begin());
  {
    std::lock_guard lock(world_->mutex);
    auto& v = world_->blocks[slot];
    v.resize(members.size());
    v[index] = block;
  }
  // The all-gather doubles as the rendezvous: after it every member has stored its block.
  allgather(members, "allocate:" + key, fmt::format("{}", bytes), op);
  std::vector<std::shared_ptr<Block>> all;
  {
    std::lock_guard lock(world_->mutex);
    all = world_->blocks[slot];
  }
  // A second exchange lets the last reader remove the in-flight entry safely.
  allgather(members, "allocated:" + key, "", op);
  if (index == 0) {
    std::lock_guard lock(world_->mutex);
    world_->blocks.erase(slot);
  }
  return std::make_shared<ThreadRegion>(std::move(all), index);
}

}  // namespace

std::vector<std::exception_ptr> run_threads_collect(int world_size,
                                                    const std::function<void(Runtime&)>& fn,
                                                    const ThreadsOptions& options) {
  SF_CHECK(world_size >= 1 && world_size <= 1024,
           "run_threads: world size {} out of range [1, 1024]", world_size);
  double timeout = options.timeout_s > 0 ? options.timeout_s : tunables().timeout_s;
  std::vector<int> hosts(size_t(world_size), 0);
  if (!options.hosts.empty()) {
    SF_CHECK(int(options.hosts.size()) == world_size,
             "run_threads: ThreadsOptions::hosts names {} hosts for a world of {} ranks (one per "
             "rank)", options.hosts.size(), world_size);
    std::vector<std::string> keys;
    for (int h : options.hosts) keys.push_back(std::to_string(h));
    hosts = number_hosts(keys);
  }
  auto world = std::make_shared<ThreadWorld>(world_size, timeout, std::move(hosts));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world_size));
  std::vector<std::thread> threads;
  threads.reserve(size_t(world_size));
  // Note [rank threads on their own CPUs]: new threads start on their creator's CPU, and a rank
  // woken from a futex is placed near its waker, so two ranks can share one core for a long
  // while (a 2-rank all-reduce measured 70 µs instead of 0.4 µs until the scheduler separated
  // them). With at least as many usable CPUs as ranks, rank r is pinned to the r-th one.
  // usable_cpus() is first called here, before any pinning, so it counts the process's CPUs.
  const bool pin = tunables().pin_threads && world_size <= usable_cpus();
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      if (pin) pin_thread(r);
      try {
        {
          Runtime rt(std::make_unique<ThreadsBootstrap>(world, r));
          RuntimeScope scope(rt);
          fn(rt);
        }
        world->finished[size_t(r)].store(true, std::memory_order_release);
      } catch (const std::exception& e) {
        errors[size_t(r)] = std::current_exception();
        ThreadsBootstrap(world, r).poison(e.what());
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
        ThreadsBootstrap(world, r).poison("unknown exception");
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

void run_threads(int world_size, const std::function<void(Runtime&)>& fn,
                 const ThreadsOptions& options) {
  std::vector<std::exception_ptr> errors = run_threads_collect(world_size, fn, options);
  // Report the root cause: the first rank whose error is not a consequence of another's.
  auto is_consequence = [](const std::exception_ptr& p) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      return e.code() == ErrorCode::PeerFailure;
    } catch (...) {
    }
    return false;
  };
  size_t first = errors.size();
  for (size_t r = 0; r < errors.size(); ++r) {
    if (errors[r] &&
        (first == errors.size() || (is_consequence(errors[first]) && !is_consequence(errors[r]))))
      first = r;
  }
  for (size_t r = first; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("rank {}: {}", r, e.what()));
    } catch (const std::exception& e) {
      throw Error(ErrorCode::Internal, fmt::format("rank {}: {}", r, e.what()));
    }
  }
}

}  // namespace symmflow
