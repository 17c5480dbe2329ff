// The store transport in one process: each rank a thread with its own StoreBootstrap (and its own
// store client) over one FileStore or TcpStore, so joining, exchanges, host shared memory, the
// validated rendezvous, timeouts and poison are tested without starting processes. (The process
// tests, process_test.cpp, cover what threads cannot: pids, SIGKILL, env start-up.)
#include <atomic>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "symmflow/core/error.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/ops/registry.hpp"
#include "symmflow/runtime/heap.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "support/scoped_tunables.hpp"
#include "temp_dir.hpp"

namespace symmflow::testing {
namespace {

using Millis = std::chrono::milliseconds;
using OpenStore = std::function<std::shared_ptr<KeyValueStore>(int rank)>;

// Runs fn(rank) on `world` threads; returns each one's error text ("" when none).
std::vector<std::string> on_threads(int world, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

StoreOptions options(std::shared_ptr<KeyValueStore> store, int rank, int world, double timeout) {
  StoreOptions o;
  o.store = std::move(store);
  o.rank = rank;
  o.world_size = world;
  o.prefix = "w";
  o.timeout_s = timeout;
  return o;
}

void check_symmetric_world(const OpenStore& open) {
  Registry::global();
  constexpr int kWorld = 3;
  std::vector<std::string> errors = on_threads(kWorld, [&](int r) {
    Runtime rt(make_store_bootstrap(options(open(r), r, kWorld, 10)));
    RuntimeScope scope(rt);
    EXPECT_EQ(rt.bootstrap().transport(), Transport::store);
    EXPECT_STREQ(rt.bootstrap().transport_name(), "store");
    Tensor t = empty_symmetric({7}, DType::f32, "world");
    // Of the ranks met: all of them now (Note [groups of members only]).
    EXPECT_EQ(rt.bootstrap().local_ranks(), kWorld);
    float* mine = t.data<float>();
    for (int i = 0; i < 7; ++i) EXPECT_EQ(mine[i], 0.0f);  // zeroed
    for (int i = 0; i < 7; ++i) mine[i] = float(r * 100 + i);
    rt.group("world")->barrier(0, "test");
    for (int p = 0; p < kWorld; ++p) {
      const float* theirs = static_cast<const float*>(peer_data(t.view(), p));
      for (int i = 0; i < 7; ++i) EXPECT_EQ(theirs[i], float(p * 100 + i));
    }
    rt.group("world")->barrier(0, "test");
    Tensor sum = call("symm_mem::one_shot_all_reduce", {t, "sum", "world"}).to_tensor();
    for (int i = 0; i < 7; ++i) EXPECT_EQ(sum.data<float>()[i], float(300 + 3 * i));
    if (r != 1) {  // non-members need not call
      rt.new_group("pair", {0, 2});
      std::vector<std::string> all = rt.group("pair")->allgather(std::to_string(r), "test");
      EXPECT_EQ(all, (std::vector<std::string>{"0", "2"}));
    }
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

TEST(StoreBootstrap, FileStoreWorldSharesMemory) {
  TempDir dir;
  check_symmetric_world([&](int) { return std::make_shared<FileStore>(dir.path()); });
}

TEST(StoreBootstrap, TcpStoreWorldSharesMemory) {
  auto server = std::make_shared<TcpStore>("127.0.0.1", 0, true);
  check_symmetric_world([&](int r) -> std::shared_ptr<KeyValueStore> {
    if (r == 0) return server;
    return std::make_shared<TcpStore>("127.0.0.1", server->port(), false);
  });
}

TEST(StoreBootstrap, AllocationSizeMismatchNamesEveryRank) {
  TempDir dir;
  std::vector<std::string> errors = on_threads(3, [&](int r) {
    Runtime rt(make_store_bootstrap(options(std::make_shared<FileStore>(dir.path()), r, 3, 10)));
    rt.bootstrap().allocate_shared({0, 1, 2}, "k", r == 1 ? 128 : 64, "test_alloc");
  });
  for (const std::string& e : errors)
    EXPECT_EQ(e,
              "test_alloc: shared allocation 'k' differs in size across ranks:\n"
              "  rank 0: 64 bytes\n  rank 1: 128 bytes\n  rank 2: 64 bytes");
}

TEST(StoreBootstrap, SameRankTwiceIsRefused) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::vector<std::string> errors = on_threads(2, [&](int t) {
    if (t == 1) std::this_thread::sleep_for(Millis(100));
    Runtime rt(make_store_bootstrap(options(store, 0, 2, 1)));
    // Joining waits for no peer (Note [groups of members only]): meeting rank 1 does.
    if (t == 0) rt.bootstrap().barrier({0, 1}, "k", "init_store");
  });
  EXPECT_EQ(errors[0], "init_store: timed out after 1 s on rank 0 waiting for rank 1");
  EXPECT_EQ(errors[1],
            "init_store: rank 0 joined the world 'w' in file store " + dir.path() +
                " 2 times: two processes were given the same rank, or the store still holds an "
                "earlier world (use a fresh directory or port, or another prefix)");
}

// A store whose first write of `failing` raises, as a process out of file descriptors would.
class FailsOnce : public KeyValueStore {
 public:
  FailsOnce(std::shared_ptr<KeyValueStore> inner, std::string failing)
      : inner_(std::move(inner)), failing_(std::move(failing)) {}
  void set(const std::string& key, const std::string& value) override {
    if (key == failing_ && !failed_.exchange(true))
      throw_error(ErrorCode::System, "store: set '{}': Too many open files", key);
    inner_->set(key, value);
  }
  std::optional<std::string> get(const std::string& key, Millis timeout) override {
    return inner_->get(key, timeout);
  }
  bool wait(const std::vector<std::string>& keys, Millis timeout) override {
    return inner_->wait(keys, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return inner_->add(key, delta); }
  std::string describe() const override { return inner_->describe(); }

 private:
  std::shared_ptr<KeyValueStore> inner_;
  std::string failing_;
  std::atomic<bool> failed_{false};
};

// Note [retrying a failed join]: rank 1's first init_store fails after it counted itself in; its
// retry joins (it is not taken for a second process holding rank 1) and the world works.
TEST(StoreBootstrap, AFailedJoinCanBeRetriedByTheSameProcess) {
  TempDir dir;
  std::vector<std::string> first(2);
  std::vector<std::string> errors = on_threads(2, [&](int r) {
    auto store = std::make_shared<FailsOnce>(std::make_shared<FileStore>(dir.path()), "w/hello/1");
    std::unique_ptr<Bootstrap> b;
    try {
      b = make_store_bootstrap(options(store, r, 2, 10));
    } catch (const Error& e) {
      first[size_t(r)] = e.what();
      b = make_store_bootstrap(options(store, r, 2, 10));
    }
    Runtime rt(std::move(b));
    RuntimeScope scope(rt);
    Tensor x = empty_symmetric({5}, DType::f32, "world");
    for (int i = 0; i < 5; ++i) x.data<float>()[i] = float(r + 1) * float(i);
    Tensor sum = call("symm_mem::one_shot_all_reduce", {x, "sum", "world"}).to_tensor();
    for (int i = 0; i < 5; ++i) EXPECT_EQ(sum.data<float>()[i], 3.0f * float(i));
  });
  EXPECT_EQ(first[0], "");
  EXPECT_EQ(first[1], "store: set 'w/hello/1': Too many open files");
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

// Issue 39 item 9: a staging too large for /dev/shm names the tunable that sized it.
TEST(StoreBootstrap, AStagingTooLargeNamesItsTunable) {
  Tunables t = tunables();
  t.one_shot_max_bytes = int64_t(1) << 40;
  ScopedTunables huge(t);
  TempDir dir;
  std::vector<std::string> errors = on_threads(2, [&](int r) {
    Runtime rt(make_store_bootstrap(options(std::make_shared<FileStore>(dir.path()), r, 2, 10)));
    rt.group("world");  // made on first use (Note [groups of members only])
  });
  for (const std::string& e : errors) {
    EXPECT_EQ(e.rfind("group 'world': its one-shot staging (2199023255552 bytes per rank: twice "
                      "SYMMFLOW_ONE_SHOT_MAX_BYTES = 1099511627776) could not be allocated; "
                      "lower SYMMFLOW_ONE_SHOT_MAX_BYTES (the all-reduces above it take "
                      "two-shot): new_group: host shared memory ",
                      0),
              0u)
        << e;
    EXPECT_NE(e.find("out of shared memory in /dev/shm: need 2199023255552 bytes"),
              std::string::npos)
        << e;
  }
}

TEST(StoreBootstrap, WorldSizeDisagreementNamesEveryRank) {
  TempDir dir;
  std::vector<std::string> errors = on_threads(3, [&](int r) {
    Runtime rt(make_store_bootstrap(
        options(std::make_shared<FileStore>(dir.path()), r, r == 0 ? 2 : 3, 5)));
    // Each meets its world (Note [groups of members only]) and reads the others' sizes then.
    std::vector<int> all{0, 1};
    if (r > 0) all.push_back(2);
    rt.bootstrap().barrier(all, "k", "init_store");
  });
  EXPECT_EQ(errors[0],
            "init_store: the ranks of world 'w' disagree on the world size:\n"
            "  rank 0: world size 2\n  rank 1: world size 3");
  for (int r = 1; r < 3; ++r)
    EXPECT_EQ(errors[size_t(r)],
              "init_store: the ranks of world 'w' disagree on the world size:\n"
              "  rank 0: world size 2\n  rank 1: world size 3\n  rank 2: world size 3");
}

TEST(StoreBootstrap, ExchangeTimesOutNamingTheAbsentRankAndPoisonNamesTheFailedOne) {
  TempDir dir;
  std::vector<std::string> errors = on_threads(3, [&](int r) {
    Runtime rt(make_store_bootstrap(options(std::make_shared<FileStore>(dir.path()), r, 3, 0.5)));
    if (r == 0) rt.bootstrap().allgather({0, 1}, "k", "", "test_absent");  // 1 never comes
    if (r == 1) {
      rt.bootstrap().allgather({1, 2}, "k", "", "test_pair");
      rt.bootstrap().poison("boom");
    }
    if (r == 2) {
      rt.bootstrap().allgather({1, 2}, "k", "", "test_pair");
      rt.bootstrap().allgather({1, 2}, "k2", "", "test_poison");  // 1 poisons instead
    }
  });
  EXPECT_TRUE(errors[0] == "test_absent: timed out after 0.5 s on rank 0 waiting for rank 1" ||
              errors[0] == "test_absent: rank 1 failed (boom) while rank 0 waited for rank 1")
      << errors[0];
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(errors[2], "test_poison: rank 1 failed (boom) while rank 2 waited for rank 1");
}

TEST(StoreBootstrap, BadOptionsAreRefused) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  auto what = [&](StoreOptions o) {
    try {
      make_store_bootstrap(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(what(options(nullptr, 0, 1, 1)), "init_store: no store given");
  EXPECT_EQ(what(options(store, 2, 2, 1)), "init_store: rank 2 out of range for world size 2");
  EXPECT_EQ(what(options(store, 0, 0, 1)), "init_store: world size 0 out of range [1, 65536]");
}

}  // namespace
}  // namespace symmflow::testing
