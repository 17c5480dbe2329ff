// The runtime on threads: groups, signal pads, heaps and every failure behaviour, each with its
// error text. Waits use a short timeout so failing paths end quickly.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#if defined(__linux__)
#include <sched.h>
#endif

#include "symmflow/runtime/heap.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow {
namespace {

ThreadsOptions fast_timeout(double s = 0.5) {
  return ThreadsOptions{s};
}

std::string message_of(const std::exception_ptr& p) {
  if (!p) return "<no error>";
  try {
    std::rethrow_exception(p);
  } catch (const std::exception& e) {
    return e.what();
  }
}

ErrorCode code_of(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    return e.code();
  } catch (...) {
  }
  return ErrorCode::Internal;
}

TEST(Runtime, WorldGroupAndRanks) {
  for (int w : {1, 2, 3, 8}) {
    std::atomic<int> sum{0};
    run_threads(w, [&](Runtime& rt) {
      EXPECT_EQ(rt.world_size(), w);
      EXPECT_EQ(&Runtime::current(), &rt);
      EXPECT_EQ(rt.group("world")->size(), w);
      EXPECT_EQ(rt.group("world")->rank(), rt.rank());
      sum += rt.rank();
    });
    EXPECT_EQ(sum.load(), w * (w - 1) / 2);
  }
}

TEST(Runtime, NoRankOnThisThread) {
  try {
    Runtime::current();
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "no symmflow rank on this thread: run inside symmflow::run_threads(...) or after "
                 "symmflow::init_mpi()");
  }
}

TEST(Runtime, BarrierOrdersWrites) {
  // Each round, rank r writes its slot, barrier, everyone checks all slots, barrier.
  const int w = 4, rounds = 300;
  std::vector<std::atomic<int>> slots(w);
  run_threads(w, [&](Runtime& rt) {
    Group& g = *rt.group("world");
    for (int i = 0; i < rounds; ++i) {
      slots[size_t(rt.rank())].store(i, std::memory_order_relaxed);
      g.barrier(0, "test");
      for (int p = 0; p < w; ++p) ASSERT_EQ(slots[size_t(p)].load(std::memory_order_relaxed), i);
      g.barrier(1, "test");
    }
  });
}

TEST(Runtime, PutAndWaitSignalRing) {
  const int w = 5, rounds = 200;
  run_threads(w, [&](Runtime& rt) {
    Group& g = *rt.group("world");
    int next = (g.rank() + 1) % w, prev = (g.rank() + w - 1) % w;
    for (int i = 0; i < rounds; ++i) {
      g.put_signal(next, 3, "ring");
      g.wait_signal(prev, 3, "ring");
    }
  });
}

// Every wait parks on its flag at once (no spinning, no yielding): 8 ranks on this machine's cores
// exchange data through barriers and a signal ring; a lost wake-up would hang until the timeout.
TEST(Runtime, ParkedWaitsAreWokenAndOrderWrites) {
  Tunables saved = tunables(), t = saved;
  t.spin_count = t.oversubscribed_spin_count = t.yield_count = 0;
  set_tunables(t);
  const int w = 8, rounds = 300;
  std::vector<std::atomic<int>> slots(w);
  auto start = std::chrono::steady_clock::now();
  run_threads(
      w,
      [&](Runtime& rt) {
        Group& g = *rt.group("world");
        int next = (g.rank() + 1) % w, prev = (g.rank() + w - 1) % w;
        for (int i = 0; i < rounds; ++i) {
          slots[size_t(rt.rank())].store(i, std::memory_order_relaxed);
          g.barrier(0, "test");
          for (int p = 0; p < w; ++p)
            ASSERT_EQ(slots[size_t(p)].load(std::memory_order_relaxed), i);
          g.put_signal(next, 1, "ring");
          g.wait_signal(prev, 1, "ring");
          g.barrier(2, "test");
        }
      },
      fast_timeout(10));
  set_tunables(saved);
  // Each wait parks for at most a 1 ms slice before it looks again, so a lost wake-up costs a
  // millisecond; 900 rounds of waits without any would take ~1 s or more.
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 5.0);
}

// A rank parked on a signal is woken by the put, not by its 1 ms re-check: 500 rounds of ping-pong
// between two parked ranks (1000 parks) end long before 1000 slices (1 s) would (7 ms here).
TEST(Runtime, ParkedSignalIsWokenByThePut) {
  Tunables saved = tunables(), t = saved;
  t.spin_count = t.oversubscribed_spin_count = t.yield_count = 0;
  set_tunables(t);
  const int rounds = 500;
  auto start = std::chrono::steady_clock::now();
  run_threads(
      2,
      [&](Runtime& rt) {
        Group& g = *rt.group("world");
        int other = 1 - g.rank();
        for (int i = 0; i < rounds; ++i) {
          if (g.rank() == 0) {
            g.put_signal(other, 0, "ping");
            g.wait_signal(other, 0, "pong");
          } else {
            g.wait_signal(other, 0, "ping");
            g.put_signal(other, 0, "pong");
          }
        }
      },
      fast_timeout(10));
  set_tunables(saved);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 0.4) << "each park waited for its slice: wake-ups are lost";
}

// Note [rank threads on their own CPUs]: with enough CPUs, rank r runs on one CPU of its own, and
// every rank still counts the process's CPUs (a pinned rank must not think it is oversubscribed).
TEST(Runtime, RankThreadsArePinnedToTheirOwnCpus) {
#if defined(__linux__)
  cpu_set_t process;
  CPU_ZERO(&process);
  ASSERT_EQ(sched_getaffinity(0, sizeof(process), &process), 0);
  const int cpus = CPU_COUNT(&process);
  if (cpus < 2) GTEST_SKIP() << "one CPU";
  const int w = std::min(cpus, 4);
  std::vector<int> cpu_of(size_t(w), -1);
  run_threads(w, [&](Runtime& rt) {
    EXPECT_EQ(rt.bootstrap().local_cpus(), cpus);
    cpu_set_t mine;
    CPU_ZERO(&mine);
    ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
    ASSERT_EQ(CPU_COUNT(&mine), 1);
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &mine)) cpu_of[size_t(rt.rank())] = c;
    }
  });
  std::sort(cpu_of.begin(), cpu_of.end());
  EXPECT_EQ(std::unique(cpu_of.begin(), cpu_of.end()), cpu_of.end()) << "two ranks share a CPU";
  // More ranks than CPUs: nobody is pinned.
  run_threads(cpus + 1, [&](Runtime& rt) {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
    EXPECT_EQ(CPU_COUNT(&mine), cpus);
    EXPECT_GT(rt.bootstrap().local_ranks(), rt.bootstrap().local_cpus());
  });
#else
  GTEST_SKIP() << "Linux only";
#endif
}

TEST(Runtime, SubgroupsAndOverlappingGroups) {
  run_threads(4, [&](Runtime& rt) {
    int r = rt.rank();
    if (r % 2 == 0) rt.new_group("even", {0, 2});
    if (r < 3) rt.new_group("first3", {2, 0, 1});  // group order differs from rank order
    if (r % 2 == 0) {
      Group& g = *rt.group("even");
      EXPECT_EQ(g.size(), 2);
      EXPECT_EQ(g.rank(), r / 2);
      g.barrier(0, "test");
    }
    if (r < 3) {
      Group& g = *rt.group("first3");
      EXPECT_EQ(g.global_rank(0), 2);
      EXPECT_EQ(g.rank(), r == 2 ? 0 : r + 1);
      std::vector<std::string> all = g.allgather(std::to_string(r), "test");
      EXPECT_EQ(all, (std::vector<std::string>{"2", "0", "1"}));
    }
  });
}

TEST(Runtime, ThreadsTransportIsAType) {
  run_threads(1, [&](Runtime& rt) {
    EXPECT_EQ(rt.bootstrap().transport(), Transport::threads);
    EXPECT_STREQ(rt.bootstrap().transport_name(), "threads");
  });
  EXPECT_STREQ(transport_name(Transport::mpi), "mpi");
  EXPECT_STREQ(transport_name(Transport::store), "store");
}

TEST(Runtime, SymmetricTensorsSeePeersCopies) {
  run_threads(3, [&](Runtime& rt) {
    Tensor t = empty_symmetric({7}, DType::f32, "world");
    EXPECT_TRUE(t.is_symmetric());
    float* mine = t.data<float>();
    for (int i = 0; i < 7; ++i) mine[i] = float(rt.rank() * 100 + i);
    rt.group("world")->barrier(0, "test");
    for (int p = 0; p < 3; ++p) {
      const float* theirs = static_cast<const float*>(peer_data(t.view(), p));
      for (int i = 0; i < 7; ++i) EXPECT_EQ(theirs[i], float(p * 100 + i));
    }
    rt.group("world")->barrier(0, "test");
  });
}

TEST(Runtime, AllocationSizeMismatchNamesEveryRank) {
  auto errors = run_threads_collect(
      3, [&](Runtime& rt) { empty_symmetric({rt.rank() == 1 ? 8 : 4}, DType::f32, "world"); },
      fast_timeout());
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(message_of(errors[size_t(r)]),
              "empty_symmetric: symmetric allocation in group 'world' differs across ranks (every "
              "rank must allocate the same sizes in the same order):\n"
              "  rank 0: allocation #0 of 16 bytes\n"
              "  rank 1: allocation #0 of 32 bytes\n"
              "  rank 2: allocation #0 of 16 bytes")
        << r;
  }
}

TEST(Runtime, AllocationOrderMismatchIsDetected) {
  // Rank 0 allocates A(16 B) then B(32 B); rank 1 allocates B then A.
  auto errors = run_threads_collect(
      2,
      [&](Runtime& rt) {
        int64_t first = rt.rank() == 0 ? 4 : 8;
        empty_symmetric({first}, DType::f32, "world");
      },
      fast_timeout());
  EXPECT_NE(message_of(errors[0]).find("rank 1: allocation #0 of 32 bytes"), std::string::npos);
  EXPECT_NE(message_of(errors[1]).find("rank 0: allocation #0 of 16 bytes"), std::string::npos);
}

TEST(Runtime, DifferentCollectivesAreDetected) {
  auto errors = run_threads_collect(
      2,
      [&](Runtime& rt) {
        if (rt.rank() == 0)
          rt.new_group("a", {0, 1});
        else
          empty_symmetric({4}, DType::f32, "world");
      },
      fast_timeout());
  EXPECT_EQ(code_of(errors[0]), ErrorCode::InvalidUsage);
  EXPECT_NE(message_of(errors[0]).find("are not in the same collective"), std::string::npos)
      << message_of(errors[0]);
}

TEST(Runtime, UnknownGroupAndChannelOutOfRange) {
  auto errors = run_threads_collect(1, [&](Runtime& rt) {
    try {
      empty_symmetric({4}, DType::f32, "tp");
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "unknown group 'tp' (known: world)");
    }
    rt.group("world")->barrier(16, "symm_mem::barrier");
  });
  EXPECT_EQ(message_of(errors[0]),
            "symm_mem::barrier: channel 16 out of range for group 'world' (valid: 0..15; set "
            "SYMMFLOW_SIGNAL_CHANNELS for more)");
}

TEST(Runtime, BadGroupLists) {
  auto errors = run_threads_collect(2, [&](Runtime& rt) {
    if (rt.rank() == 0) {
      try {
        rt.new_group("g", {0, 0});
        ADD_FAILURE();
      } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "new_group 'g': rank 0 listed twice");
      }
      try {
        rt.new_group("g", {0, 5});
        ADD_FAILURE();
      } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "new_group 'g': rank 5 is outside the world of 2 ranks");
      }
      rt.new_group("g", {1});
    }
  });
  EXPECT_EQ(message_of(errors[0]), "new_group 'g': rank 0 calls it but is not a member (1)");
}

TEST(Runtime, RankThatThrowsFailsPeersFast) {
  auto start = std::chrono::steady_clock::now();
  auto errors = run_threads_collect(
      4,
      [&](Runtime& rt) {
        if (rt.rank() == 2) throw Error(ErrorCode::InvalidUsage, "boom");
        rt.group("world")->barrier(0, "symm_mem::one_shot_all_reduce");
      },
      fast_timeout(20));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took, 5.0);  // far below the 20 s timeout
  EXPECT_EQ(message_of(errors[2]), "boom");
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(code_of(errors[size_t(r)]), ErrorCode::PeerFailure);
    // While it waited, or at the call when rank 2 failed first (Note [poisoned groups]).
    const std::string m = message_of(errors[size_t(r)]);
    const std::string rank = std::to_string(r);
    EXPECT_TRUE(m.rfind("symm_mem::one_shot_all_reduce: rank 2 failed (boom) while rank " + rank +
                            " waited",
                        0) == 0 ||
                m == "symm_mem::one_shot_all_reduce: rank 2 failed (boom) before rank " + rank +
                         " called; the world is poisoned, so no call of group 'world' runs")
        << m;
  }
  try {
    run_threads(
        4,
        [&](Runtime& rt) {
          if (rt.rank() == 2) throw Error(ErrorCode::InvalidUsage, "boom");
          rt.group("world")->barrier(0, "x");
        },
        fast_timeout(20));
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "rank 2: boom");  // the root cause, not a peer's consequence
  }
}

TEST(Runtime, RankThatNeverArrivesTimesOutNamingIt) {
  auto start = std::chrono::steady_clock::now();
  auto errors = run_threads_collect(
      4,
      [&](Runtime& rt) {
        if (rt.rank() == 3) {
          // Never calls the barrier, and is still running when its peers time out (a rank that
          // returns is named at once instead: left_test.cpp).
          std::this_thread::sleep_for(std::chrono::milliseconds(800));
          return;
        }
        rt.group("world")->barrier(0, "symm_mem::one_shot_all_reduce");
      },
      fast_timeout(0.3));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took, 3.0);
  EXPECT_FALSE(errors[3]);
  // The first rank to time out poisons the world; the others report that failure, which names
  // the missing rank too.
  int timeouts = 0;
  for (int r : {0, 1, 2}) {
    std::string msg = message_of(errors[size_t(r)]);
    if (code_of(errors[size_t(r)]) == ErrorCode::Timeout) {
      ++timeouts;
      EXPECT_EQ(msg,
                "symm_mem::one_shot_all_reduce: timed out after 0.3 s in group 'world' on "
                "rank " +
                    std::to_string(r) + " waiting for rank 3");
    } else {
      EXPECT_EQ(code_of(errors[size_t(r)]), ErrorCode::PeerFailure);
      EXPECT_NE(msg.find("timed out after 0.3 s in group 'world'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("waited for rank 3 in group 'world'"), std::string::npos) << msg;
    }
  }
  EXPECT_GE(timeouts, 1);
}

TEST(Runtime, UseAfterGroupDestroyed) {
  auto errors = run_threads_collect(2, [&](Runtime& rt) {
    rt.new_group("tp", {0, 1});
    Tensor t = empty_symmetric({4}, DType::f32, "tp");
    std::shared_ptr<Group> g = rt.group("tp");
    rt.destroy_group("tp");
    try {
      g->barrier(0, "symm_mem::barrier");
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(),
                   "symm_mem::barrier: group 'tp' was destroyed; create it again with new_group");
    }
    symmetric_heap_of(t.view(), "symm_mem::one_shot_all_reduce", "input", *g);
  });
  EXPECT_EQ(
      message_of(errors[0]),
      "symm_mem::one_shot_all_reduce: group 'tp' was destroyed; create it again with new_group");
}

TEST(Runtime, NonSymmetricAndWrongGroupTensors) {
  run_threads(2, [&](Runtime& rt) {
    rt.new_group("a", {0, 1});
    rt.new_group("b", {0, 1});
    Tensor plain = Tensor::empty({4}, DType::f32);
    Tensor in_a = empty_symmetric({4}, DType::f32, "a");
    try {
      symmetric_heap_of(plain.view(), "symm_mem::one_shot_all_reduce", "input", *rt.group("a"));
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(),
                   "symm_mem::one_shot_all_reduce: argument 'input' is not in symmetric memory; "
                   "allocate it with symmflow::empty_symmetric(shape, dtype, \"a\") or let the "
                   "compiler place it");
    }
    try {
      symmetric_heap_of(in_a.view(), "symm_mem::one_shot_all_reduce", "input", *rt.group("b"));
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(),
                   "symm_mem::one_shot_all_reduce: argument 'input' was allocated in group 'a' but "
                   "the op runs on group 'b'");
    }
  });
}

}  // namespace
}  // namespace symmflow
