// Note [poisoned groups] (src/runtime/group.hpp): an error inside a collective is final for its
// group on every member; later calls raise before anything moves, naming the first error; a new
// group recovers (a new world after an abort or a failed rank, which end the world). Issue 39's items 1-3 as they were found (each returned wrong sums, or nothing,
// before), on the threads transport: every CPU transport shares the group's pads.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "symmflow/ops/call.hpp"
#include "symmflow/ops/registry.hpp"
#include "symmflow/runtime/heap.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow::testing {
namespace {

constexpr std::string_view kAllReduce = "symm_mem::one_shot_all_reduce";

Tensor filled(int64_t n, float v, const std::string& group) {
  Tensor x = empty_symmetric({n}, DType::f32, group);
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = v;
  return x;
}

// Runs fn on `world` threads (timeout `timeout_s`); fails the test with every rank's error.
void on_ranks(int world, double timeout_s, const std::function<void(Runtime&)>& fn) {
  Registry::global();
  auto errors = run_threads_collect(world, fn, ThreadsOptions{timeout_s});
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
  }
}

// `calls` all-reduces of x in group "world" that must each raise `code` at once, naming the
// group as poisoned by `first_rank` with `first` in its text; none may return. (Allocating in
// the group is refused as well: a symmetric allocation is a rendezvous of the group.)
void expect_refused(Runtime& rt, const Tensor& x, int calls, ErrorCode code, int first_rank,
                    const std::string& first) {
  const std::string group = "world";
  const std::string head =
      fmt::format("{}: group '{}' is poisoned: a collective failed on rank {} at ", kAllReduce,
                  group, first_rank);
  for (int i = 0; i < calls; ++i) {
    auto start = std::chrono::steady_clock::now();
    try {
      call(kAllReduce, {x, "sum", group});
      ADD_FAILURE() << "rank " << rt.rank() << ": call " << i << " returned";
      return;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.code(), code) << m;
      EXPECT_EQ(m.rfind(head, 0), 0u) << "rank " << rt.rank() << ": " << m;
      EXPECT_NE(m.find(first), std::string::npos) << m;
      EXPECT_NE(m.find("destroy it and create a new group to go on"), std::string::npos) << m;
      if (::testing::Test::HasFailure()) return;
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              0.5);  // at once, not after a wait
  }
}

// `calls` all-reduces of x in group "world" after the world was poisoned (an abort, a failed
// rank): each must raise PeerFailure with every one of `words` in its text; none may return.
void expect_peer_failures(Runtime& rt, const Tensor& x, int calls,
                          const std::vector<std::string>& words) {
  for (int i = 0; i < calls; ++i) {
    try {
      call(kAllReduce, {x, "sum", "world"});
      ADD_FAILURE() << "rank " << rt.rank() << ": call " << i << " returned";
      return;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.code(), ErrorCode::PeerFailure) << m;
      for (const std::string& w : words) EXPECT_NE(m.find(w), std::string::npos) << m;
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// Recovery (Note [poisoned groups]): a new group of the same ranks sums correctly.
void expect_recovered(Runtime& rt, int world, int64_t n) {
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(r);
  rt.new_group("recovered", ranks);
  Tensor y = filled(n, float(rt.rank() + 1), "recovered");
  for (int round = 0; round < 3; ++round) {  // functional: y stays, the sum is returned
    Tensor sum = call(kAllReduce, {y, "sum", "recovered"}).to_tensor();
    const float want = float(world * (world + 1) / 2);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sum.data<float>()[i], want) << "element " << i;
  }
}

// Item 1: rank 0's staged one_shot advanced its staging half before the barrier that raised; the
// five all-reduces after it summed the peer's previous value, on both ranks, with no error.
TEST(PoisonedGroup, AStagedAllReduceMeetingAnAllGatherLeavesNoWrongSums) {
  on_ranks(2, 5, [](Runtime& rt) {
    Tensor x = filled(4, float(rt.rank() + 1), "world");
    try {
      if (rt.rank() == 0) {
        call(kAllReduce, {x, "sum", "world"});
      } else {
        call("symm_mem::all_gather_out", {x, "world", Tensor::zeros({8}, DType::f32)});
      }
      ADD_FAILURE() << "no disagreement";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << e.what();
    }
    expect_refused(rt, x, 100, ErrorCode::InvalidUsage, rt.rank(), "disagree on op");
    try {
      filled(4, 1.0f, "world");
      ADD_FAILURE() << "an allocation in the poisoned group returned";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("empty_symmetric: group 'world' is poisoned"),
                std::string::npos)
          << e.what();
    }
    expect_recovered(rt, 2, 4);
  });
}

// Item 2: rank 1 sleeps past the timeout; rank 0's Timeout is final there, and rank 1's next
// call (which found rank 0's flag of the failed call and used to return a wrong sum) raises too,
// naming rank 0's Timeout. Both a staged and an in-place size.
TEST(PoisonedGroup, ATimeoutIsFinalOnBothRanks) {
  for (int64_t n : {int64_t(4), int64_t(4096)}) {
    SCOPED_TRACE(n);
    std::atomic<bool> timed_out{false};
    on_ranks(2, 0.5, [&](Runtime& rt) {
      Tensor x = filled(n, float(rt.rank() + 1), "world");
      if (rt.rank() == 1) {
        while (!timed_out.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        try {
          call(kAllReduce, {x, "sum", "world"});
          ADD_FAILURE() << "rank 1's late call returned";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
        }
      } else {
        try {
          call(kAllReduce, {x, "sum", "world"});
          ADD_FAILURE() << "no timeout";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::Timeout) << e.what();
        }
        timed_out = true;
      }
      expect_refused(rt, x, 100, ErrorCode::Timeout, 0, "timed out after 0.5 s");
      expect_recovered(rt, 2, n);
    });
  }
}

// Item 3: an abort poisons the world; every later call of every rank raises (waits that need
// not block used to return without reading the poison), PeerFailure naming the abort's words,
// and so does making a new group: an abort ends the world; a new world recovers.
TEST(PoisonedGroup, AnAbortRefusesEveryLaterCallOnEveryRank) {
  std::atomic<bool> aborted{false};
  on_ranks(3, 5, [&](Runtime& rt) {
    Tensor x = filled(4, 1.0f, "world");
    if (rt.rank() == 0) {
      rt.bootstrap().poison("stopping the request");
      aborted = true;
    }
    while (!aborted.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    expect_peer_failures(rt, x, 100, {"(stopping the request)"});
    try {
      rt.new_group("after_abort", {0, 1, 2});
      ADD_FAILURE() << "rank " << rt.rank() << ": new_group returned after the abort";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::PeerFailure) << e.what();
      EXPECT_NE(std::string(e.what()).find("(stopping the request)"), std::string::npos)
          << e.what();
    }
  });
  // The documented recovery: a new world of the same ranks, fresh memory, right sums.
  on_ranks(3, 5, [](Runtime& rt) { expect_recovered(rt, 3, 4); });
}

// PeerFailure: rank 2 dies of an error of its own (not a collective's) after one right sum;
// every later call of ranks 0 and 1, 100 each, raises PeerFailure with rank 2's words, a new
// group too; the survivors' new world sums right. Both a staged and an in-place size.
TEST(PoisonedGroup, APeerThatFailedIsFinalAndTheSurvivorsNewWorldRecovers) {
  for (int64_t n : {int64_t(4), int64_t(4096)}) {
    SCOPED_TRACE(n);
    auto errors = run_threads_collect(
        3,
        [n](Runtime& rt) {
          Tensor x = filled(n, float(rt.rank() + 1), "world");
          Tensor sum = call(kAllReduce, {x, "sum", "world"}).to_tensor();
          ASSERT_EQ(sum.data<float>()[n - 1], 6.0f);
          if (rt.rank() == 2) throw std::runtime_error("disk full writing the checkpoint");
          expect_peer_failures(rt, x, 100, {"rank 2 failed", "disk full writing the checkpoint"});
          try {
            rt.new_group("after_failure", {0, 1});
            ADD_FAILURE() << "rank " << rt.rank() << ": new_group returned";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::PeerFailure) << e.what();
            EXPECT_NE(std::string(e.what()).find("so the world is poisoned and no group of it can be "
                                                  "made; recovery is a new world"),
                      std::string::npos)
                << e.what();
          }
        },
        ThreadsOptions{5});
    for (int r = 0; r < 2; ++r) EXPECT_FALSE(errors[size_t(r)]) << "rank " << r;
    EXPECT_TRUE(errors[2]);
    on_ranks(2, 5, [n](Runtime& rt) { expect_recovered(rt, 2, n); });
  }
}

}  // namespace
}  // namespace symmflow::testing
