// Waits for a peer that can never come end at once with the right error (Note [peers that left]
// in include/symmflow/runtime/group.hpp): a peer that finished cleanly or destroyed the group is
// named as such instead of a timeout, and a rank whose own earlier failure poisoned the world
// reports that failure instead of "timed out after 20 s" after 0 s. Every test runs with a 20 s
// timeout and must end in well under it.
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "symmflow/runtime/heap.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow {
namespace {

constexpr double kTimeout = 20;

std::string message_of(const std::exception_ptr& p) {
  if (!p) return "<no error>";
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    return e.code() == ErrorCode::PeerFailure ? e.what()
                                               : std::string("<not PeerFailure> ") + e.what();
  } catch (const std::exception& e) {
    return e.what();
  }
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST(PeersThatLeft, APeerThatFinishedFailsTheNextBarrierAtOnce) {
  auto start = std::chrono::steady_clock::now();
  auto errors = run_threads_collect(
      2,
      [](Runtime& rt) {
        rt.group("world")->barrier(0, "first");  // both ranks take part
        if (rt.rank() == 1) return;              // rank 1 is done
        rt.group("world")->barrier(0, "symm_mem::barrier");
      },
      ThreadsOptions{kTimeout});
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_EQ(message_of(errors[0]),
            "symm_mem::barrier: rank 1 has finished (it left the world cleanly) while rank 0 "
            "waited for it in group 'world'");
  EXPECT_EQ(message_of(errors[1]), "<no error>");
}

TEST(PeersThatLeft, APeerThatFinishedFailsASubgroupWaitAndAnExchange) {
  auto start = std::chrono::steady_clock::now();
  auto errors = run_threads_collect(
      3,
      [](Runtime& rt) {
        if (rt.rank() == 2) return;
        auto tp = rt.new_group("tp", {0, 1});
        if (rt.rank() == 1) {
          tp->barrier(0, "first");
          return;
        }
        tp->barrier(0, "first");
        // A signal rank 1 never sends, then an exchange of the world, whose rank 2 never joined
        // the subgroup (made by its members alone) and finished first.
        try {
          tp->wait_signal(1, 0, "symm_mem::wait_signal");
        } catch (const Error& e) {
          EXPECT_EQ(std::string(e.what()),
                    "symm_mem::wait_signal: rank 1 has finished (it left the world cleanly) while "
                    "rank 0 waited for it in group 'tp'");
        }
        rt.group("world")->allgather("x", "symm_mem::empty");
      },
      ThreadsOptions{kTimeout});
  EXPECT_LT(seconds_since(start), 5.0);
  // The world's exchange waits first for rank 1, which finished too.
  EXPECT_EQ(message_of(errors[0]),
            "symm_mem::empty: rank 1 has finished (it left the world cleanly) while rank 0 "
            "waited for it");
}

TEST(PeersThatLeft, APeerThatDestroyedTheGroupIsNamed) {
  auto start = std::chrono::steady_clock::now();
  auto errors = run_threads_collect(
      2,
      [](Runtime& rt) {
        auto tp = rt.new_group("tp", {0, 1});
        if (rt.rank() == 1) {
          rt.destroy_group("tp");
          rt.group("world")->barrier(1, "later");
          return;
        }
        try {
          tp->barrier(0, "symm_mem::barrier");
          ADD_FAILURE() << "no error";
        } catch (const Error& e) {
          EXPECT_EQ(std::string(e.what()),
                    "symm_mem::barrier: rank 1 has destroyed the group while rank 0 waited for it "
                    "in group 'tp'");
        }
        rt.group("world")->barrier(1, "later");
      },
      ThreadsOptions{kTimeout});
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_EQ(message_of(errors[0]), "<no error>");
  EXPECT_EQ(message_of(errors[1]), "<no error>");
}

// A rank that failed (and poisoned the world) and then waits again is told its own failure.
TEST(PeersThatLeft, ARanksOwnEarlierFailureIsReportedNotATimeout) {
  auto start = std::chrono::steady_clock::now();
  auto errors = run_threads_collect(
      2,
      [](Runtime& rt) {
        if (rt.rank() == 1) {
          // Waits (bounded) until rank 0 failed, then leaves.
          while (!rt.bootstrap().failure()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          return;
        }
        rt.bootstrap().poison("out of memory in step 3");
        rt.group("world")->barrier(0, "symm_mem::one_shot_all_reduce");
      },
      ThreadsOptions{kTimeout});
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_EQ(message_of(errors[0]),
            "symm_mem::one_shot_all_reduce: rank 0 failed earlier (out of memory in step 3), so "
            "the world is poisoned and it waits for no peer in group 'world'");
}

}  // namespace
}  // namespace symmflow
