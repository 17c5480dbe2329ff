// The store transport with real processes: the test starts W children of this binary (spawn.hpp;
// fork + exec, no mpirun) that join one world through a FileStore or a TcpStore served by rank 0,
// from the environment as a launcher would set it, and run a scenario of child.cpp:
// - the collective matrix (tests/collectives/cases.hpp, every element checked on every rank) for
//   W = 2, 3, 4 over both stores;
// - a peer SIGKILLed while the others wait for it in an all-reduce: every other rank raises
//   PeerFailure naming it, well within the 5 s timeout;
// - an allocation whose size differs on rank 1: every rank's error lists each rank's size.
// - shutdown_store: ranks leave the world before exit, after which init_store and every handle
//   made before refuse (Note [use after shutdown]);
// - a forked child never speaks for its parent's rank (Note [forked children]);
// - a rank that left cleanly: a store wait for it fails at once naming it, not at the timeout.
#include <gtest/gtest.h>

#include "spawn.hpp"
#include "temp_dir.hpp"

namespace symmflow::testing {
namespace {

struct MatrixParam {
  std::string store;
  int world;
};

class StoreProcesses : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(StoreProcesses, CollectiveMatrix) {
  TempDir dir;
  ChildWorld world(dir.path(), GetParam().world);
  world.start({"matrix", store_spec(GetParam().store, dir), "m", 60});
  ASSERT_TRUE(world.wait_all(std::chrono::seconds(200))) << "timed out\n" << world.all_output();
  for (int r = 0; r < GetParam().world; ++r) {
    EXPECT_EQ(world.exit_code(r), 0) << world.all_output();
    EXPECT_NE(world.output(r).find("matrix ok: "), std::string::npos) << world.output(r);
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, StoreProcesses,
                         ::testing::Values(MatrixParam{"file", 2}, MatrixParam{"tcp", 2},
                                           MatrixParam{"file", 3}, MatrixParam{"tcp", 3},
                                           MatrixParam{"file", 4}, MatrixParam{"tcp", 4}),
                         [](const ::testing::TestParamInfo<MatrixParam>& p) {
                           return p.param.store + std::to_string(p.param.world);
                         });

void check_killed_peer(const std::string& kind, int w, int victim) {
  TempDir dir;
  ChildWorld world(dir.path(), w);
  constexpr double kTimeout = 5;
  world.start({"kill", store_spec(kind, dir), "k", kTimeout, victim});
  std::vector<int> all;
  for (int r = 0; r < w; ++r) all.push_back(r);
  ASSERT_TRUE(world.wait_for_line(all, "ready", std::chrono::seconds(30))) << world.all_output();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the others are waiting now
  world.kill_rank(victim);
  ASSERT_TRUE(world.wait_all(std::chrono::duration<double>(kTimeout + 10))) << world.all_output();
  EXPECT_EQ(world.exit_code(victim), 128 + SIGKILL);
  for (int r = 0; r < w; ++r) {
    if (r == victim) continue;
    std::string out = world.output(r);
    EXPECT_EQ(world.exit_code(r), 0) << out;
    EXPECT_NE(out.find("code: PeerFailure"), std::string::npos) << out;
    std::string expected = "message: symm_mem::one_shot_all_reduce: rank " +
                           std::to_string(victim) + " failed (its process ";
    EXPECT_NE(out.find(expected), std::string::npos) << out;
    EXPECT_NE(out.find("ended without reporting an error: killed by a signal or crashed) while "
                       "rank " + std::to_string(r) + " waited"),
              std::string::npos)
        << out;
    size_t at = out.find("elapsed: ");
    ASSERT_NE(at, std::string::npos) << out;
    EXPECT_LT(std::stod(out.substr(at + 9)), kTimeout) << out;
  }
}

TEST(StoreFailure, KilledPeerIsNamedWithinTheTimeoutFile) { check_killed_peer("file", 3, 2); }
TEST(StoreFailure, KilledPeerIsNamedWithinTheTimeoutTcp) { check_killed_peer("tcp", 2, 1); }
// Rank 0 serves the TcpStore: its peers lose the store too, and still name it.
TEST(StoreFailure, KilledServingRankIsNamedWithinTheTimeout) { check_killed_peer("tcp", 3, 0); }

TEST(StoreProcess, ShutdownStoreLeavesTheWorldBeforeExit) {
  TempDir dir;
  ChildWorld world(dir.path(), 2);
  world.start({"shutdown", store_spec("file", dir), "s", 10});
  ASSERT_TRUE(world.wait_all(std::chrono::seconds(30))) << world.all_output();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(world.exit_code(r), 0) << world.all_output();
    const std::string out = world.output(r), me = std::to_string(r);
    // Note [use after shutdown]: every handle made before raises, none crashes.
    for (const std::string& line : std::vector<std::string>{
             "init_store: init_store: symmflow has shut down: this process left its store world (at "
          "exit or by shutdown), and a process joins one world once",
          "all_reduce: group 'world': symmflow has shut down (rank " + me +
              " left its world at exit or by shutdown); no call runs after it",
          "barrier: after shutdown: symmflow has shut down (rank " + me +
              " left its world at exit or by shutdown), so no call of group 'world' runs",
          "empty_symmetric: group 'world': symmflow has shut down (rank " + me +
              " left its world at exit or by shutdown); no call runs after it",
          "new_group: new_group: symmflow has shut down (rank " + me +
              " left its world at exit or by shutdown); no call runs after it"}) {
      EXPECT_NE(out.find(line + "\n"), std::string::npos) << line << "\n" << out;
    }
  }
}

// A rank whose collective agreement is off is named as such by every rank (issue 39 item 9).
TEST(StoreAgreement, ARankWithAgreementOffIsNamedOnEveryRank) {
  TempDir dir;
  ChildWorld world(dir.path(), 3);
  world.start({"agreement_off", store_spec("file", dir), "o", 10});
  ASSERT_TRUE(world.wait_all(std::chrono::seconds(30))) << world.all_output();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(world.exit_code(r), 0) << world.all_output();
    EXPECT_NE(world.output(r).find(
                  "code: InvalidUsage\nelapsed: "),
              std::string::npos)
        << world.output(r);
    EXPECT_NE(world.output(r).find(
                  "message: symm_mem::one_shot_all_reduce: the ranks of group 'world' disagree on "
                  "collective agreement (collective agreement; no data was exchanged):\n"
                  "  collective agreement: on on ranks 0, 2; off "
                  "(SYMMFLOW_COLLECTIVE_AGREEMENT=0) on rank 1\n"),
              std::string::npos)
        << world.output(r);
  }
}

// Note [forked children]: a forked child that exits, or dies of an uncaught exception, neither
// finishes nor poisons its parent's rank.
TEST(StoreProcess, AForkedChildNeverSpeaksForItsParentsRank) {
  for (const char* kind : {"file", "tcp"}) {
    TempDir dir;
    ChildWorld world(dir.path(), 2);
    world.start({"fork", store_spec(kind, dir), "k", 10});
    ASSERT_TRUE(world.wait_all(std::chrono::seconds(30))) << world.all_output();
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(world.exit_code(r), 0) << kind << "\n" << world.all_output();
      EXPECT_NE(world.output(r).find("forked: ok"), std::string::npos) << world.all_output();
    }
    for (const char* line : {"child exit: exited\n", "child uncaught: signalled\n"})
      EXPECT_NE(world.output(0).find(line), std::string::npos) << world.output(0);
  }
}

// A store wait for a rank that already left cleanly fails at once, not after the timeout.
void check_finished_peer(const std::string& kind) {
  TempDir dir;
  ChildWorld world(dir.path(), 2);
  constexpr double kTimeout = 10;
  world.start({"finished", store_spec(kind, dir), "f", kTimeout});
  ASSERT_TRUE(world.wait_all(std::chrono::seconds(30))) << world.all_output();
  EXPECT_EQ(world.exit_code(1), 0) << world.all_output();
  std::string out = world.output(0);
  EXPECT_EQ(world.exit_code(0), 0) << out;
  EXPECT_NE(out.find("code: PeerFailure\nelapsed: "), std::string::npos) << out;
  EXPECT_NE(out.find("message: test_late: rank 1 has finished (it left the world cleanly) while "
                     "rank 0 waited for it"),
            std::string::npos)
      << out;
  size_t at = out.find("elapsed: ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_LT(std::stod(out.substr(at + 9)), 2.0) << out;
}

TEST(StoreFailure, AWaitForARankThatFinishedFailsAtOnceFile) { check_finished_peer("file"); }
TEST(StoreFailure, AWaitForARankThatFinishedFailsAtOnceTcp) { check_finished_peer("tcp"); }

void check_uncaught(const std::string& scenario, ChildSpec::Env env) {
  TempDir dir;
  ChildWorld world(dir.path(), 3);
  world.start({scenario, store_spec("file", dir), "u", 10, -1, std::move(env)});
  ASSERT_TRUE(world.wait_all(std::chrono::seconds(30))) << world.all_output();
  EXPECT_EQ(world.exit_code(2), 128 + SIGABRT) << world.all_output();
  for (int r = 0; r < 2; ++r) {
    std::string out = world.output(r);
    EXPECT_EQ(world.exit_code(r), 0) << out;
    // Rank 2's words reach rank r in one of three correct forms, by timing: rank r was waiting
    // for it ("rank 2 failed (...) while rank r waited"), the world's poison came before rank r
    // called ("... before rank r called"), or a peer that waited recorded it in the group first
    // ("group 'world' is poisoned: a collective failed on rank q ... (... rank 2 failed (...)
    // ...)"). Each names rank 2 and its words, and none runs the call.
    EXPECT_NE(out.find("code: PeerFailure\nmessage: symm_mem::one_shot_all_reduce: "),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("rank 2 failed (uncaught exception: boom)"), std::string::npos) << out;
  }
}

TEST(StoreFailure, UncaughtExceptionPoisonsTheWorld) { check_uncaught("throw", {}); }

// Rank 0 raises rank 2's failure and finishes while rank 1 waits for it, inside rank 1's
// rate-limited failure check: rank 1 still names rank 2 and its words, never "rank 0 has
// finished" (Note [the cause before the departure] in wait.cpp).
TEST(StoreFailure, APeerThatFinishedAfterTheWorldFailedIsNotBlamed) {
  check_uncaught("throw_staged", {});
}

TEST(StoreFailure, AllocationMismatchNamesBothRanks) {
  TempDir dir;
  ChildWorld world(dir.path(), 3);
  world.start({"mismatch", store_spec("tcp", dir), "x", 10});
  ASSERT_TRUE(world.wait_all(std::chrono::seconds(60))) << world.all_output();
  for (int r = 0; r < 3; ++r) {
    std::string out = world.output(r);
    EXPECT_EQ(world.exit_code(r), 0) << out;
    EXPECT_NE(out.find("heap: empty_symmetric: symmetric allocation in group 'world' differs "
                       "across ranks (every rank must allocate the same sizes in the same "
                       "order):\n  rank 0: allocation #0 of 16 bytes\n  rank 1: allocation #0 "
                       "of 32 bytes\n  rank 2: allocation #0 of 16 bytes"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("bootstrap: test_alloc: shared allocation 'direct' differs in size across "
                       "ranks:\n  rank 0: 64 bytes\n  rank 1: 128 bytes\n  rank 2: 64 bytes"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("after: ok"), std::string::npos) << out;
  }
}

// Rank agreement over processes (Note [rank agreement] in src/exec/agreement.cpp).
TEST(StoreAgreement, RanksBindingAnotherDtypeOfTheSameSizeRaiseOnEveryRank) {
  TempDir dir;
  ChildWorld world(dir.path(), 3);
  world.start({"agreement", store_spec("file", dir), "x", 10});
  ASSERT_TRUE(world.wait_all(std::chrono::seconds(60))) << world.all_output();
  for (int r = 0; r < 3; ++r) {
    std::string out = world.output(r);
    EXPECT_EQ(world.exit_code(r), 0) << out;
    EXPECT_NE(out.find("runs: 3 3, exchanges 2"), std::string::npos) << out;
    EXPECT_NE(out.find("agreement: run: the ranks of program 'agree' bind different inputs (rank "
                       "agreement):\n  input 'x' (agree.sf:2): ranks 0, 2 bind f32[8, 4] strides "
                       "[4, 1], rank 1 binds bf16[8, 8] strides [8, 1]"),
              std::string::npos)
        << out;
  }
}

}  // namespace
}  // namespace symmflow::testing
