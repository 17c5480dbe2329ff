// The runtime on the mpi transport (one process per rank, run with mpirun -np 2 and -np 4): world
// and groups, barrier / put / wait correctness loops over shared-memory windows, symmetric tensors,
// and the error texts every rank must see. Suites MpiFailure.* and MpiTimeout.* poison the world
// or break its exchange on purpose; CMake runs each of them in a process of its own.
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "support/rank_helpers.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/runtime/heap.hpp"

namespace symmflow::testing {
namespace {

TEST(MpiRuntime, WorldRanksAndGroups) {
  Runtime& r = rt();
  ASSERT_GE(r.world_size(), 2);
  EXPECT_EQ(r.bootstrap().transport(), Transport::mpi);
  EXPECT_STREQ(r.bootstrap().transport_name(), "mpi");
  EXPECT_EQ(&init_mpi(), &r);  // a second call returns the same runtime
  EXPECT_TRUE(mpi_available());
  EXPECT_EQ(r.group("world")->size(), r.world_size());
  EXPECT_EQ(r.group("world")->rank(), r.rank());
  std::vector<std::string> all = r.group("world")->allgather(std::to_string(r.rank() * 10), "test");
  for (int p = 0; p < r.world_size(); ++p) EXPECT_EQ(all[size_t(p)], std::to_string(p * 10));
}

TEST(MpiRuntime, SubgroupsAndOverlappingGroups) {
  Runtime& r = rt();
  int w = r.world_size(), me = r.rank();
  std::vector<int> evens, reversed;
  for (int p = 0; p < w; p += 2) evens.push_back(p);
  for (int p = w - 1; p >= 0; --p) reversed.push_back(p);
  std::string even = me % 2 == 0 ? fresh_group("even", evens) : "";
  std::string rev = fresh_group("rev", reversed);        // group order differs from rank order
  std::string pair = me < 2 ? fresh_group("pair", {1, 0}) : "";  // overlaps both
  if (!even.empty()) {
    Group& g = *r.group(even);
    EXPECT_EQ(g.size(), int(evens.size()));
    EXPECT_EQ(g.rank(), me / 2);
    g.barrier(0, "test");
    std::vector<std::string> got = g.allgather(std::to_string(me), "test");
    for (size_t i = 0; i < evens.size(); ++i) EXPECT_EQ(got[i], std::to_string(evens[i]));
  }
  Group& g = *r.group(rev);
  EXPECT_EQ(g.global_rank(0), w - 1);
  EXPECT_EQ(g.rank(), w - 1 - me);
  std::vector<std::string> got = g.allgather(std::to_string(me), "test");
  for (int i = 0; i < w; ++i) EXPECT_EQ(got[size_t(i)], std::to_string(w - 1 - i));
  if (!pair.empty()) {
    Group& p = *r.group(pair);
    EXPECT_EQ(p.rank(), 1 - me);
    for (int i = 0; i < 50; ++i) p.barrier(2, "test");
  }
  g.barrier(0, "test");
}

TEST(MpiRuntime, BarrierOrdersWrites) {
  // Each round every rank writes the round number into its own copy, barrier, reads every peer's
  // copy, barrier.
  Runtime& r = rt();
  std::string name = fresh_group("barrier");
  Group& g = *r.group(name);
  Tensor t = empty_symmetric({1}, DType::i32, name);
  auto* mine = static_cast<volatile int32_t*>(t.view().data);
  for (int i = 1; i <= 200; ++i) {
    *mine = i;
    g.barrier(0, "test");
    for (int p = 0; p < g.size(); ++p)
      ASSERT_EQ(*static_cast<volatile int32_t*>(peer_data(t.view(), p)), i) << "peer " << p;
    g.barrier(1, "test");
  }
}

TEST(MpiRuntime, PutAndWaitSignalRing) {
  // Each round every rank stores into the next rank's slot and signals it (channel 3); the next
  // rank reads the value and hands the slot back (channel 4) before it may be written again.
  Runtime& r = rt();
  std::string name = fresh_group("ring");
  Group& g = *r.group(name);
  int w = g.size(), next = (g.rank() + 1) % w, prev = (g.rank() + w - 1) % w;
  Tensor t = empty_symmetric({1}, DType::i64, name);
  for (int i = 0; i < 200; ++i) {
    if (i > 0) g.wait_signal(next, 4, "ring");
    *static_cast<volatile int64_t*>(peer_data(t.view(), next)) = int64_t(i) * 1000 + g.rank();
    g.put_signal(next, 3, "ring");
    g.wait_signal(prev, 3, "ring");
    ASSERT_EQ(*static_cast<volatile int64_t*>(t.view().data), int64_t(i) * 1000 + prev);
    g.put_signal(prev, 4, "ring");
  }
  g.wait_signal(next, 4, "ring");
  g.barrier(0, "test");
}

TEST(MpiRuntime, SymmetricTensorsSeePeersCopies) {
  Runtime& r = rt();
  std::string name = fresh_group("copies");
  Tensor t = empty_symmetric({7}, DType::f32, name);
  EXPECT_TRUE(t.is_symmetric());
  float* mine = t.data<float>();
  for (int i = 0; i < 7; ++i) EXPECT_EQ(mine[i], 0.0f);  // zeroed
  for (int i = 0; i < 7; ++i) mine[i] = float(r.rank() * 100 + i);
  Group& g = *r.group(name);
  g.barrier(0, "test");
  for (int p = 0; p < g.size(); ++p) {
    const float* theirs = static_cast<const float*>(peer_data(t.view(), p));
    for (int i = 0; i < 7; ++i) EXPECT_EQ(theirs[i], float(p * 100 + i));
  }
  g.barrier(0, "test");
  // A second heap in the same group is a distinct window.
  Tensor u = empty_symmetric({3}, DType::f64, name);
  EXPECT_NE(u.view().data, t.view().data);
}

TEST(MpiRuntime, AllocationSizeMismatchNamesEveryRank) {
  Runtime& r = rt();
  std::string name = fresh_group("mismatch");
  std::string want = "empty_symmetric: symmetric allocation in group '" + name +
                     "' differs across ranks (every rank must allocate the same sizes in the "
                     "same order):";
  for (int p = 0; p < r.world_size(); ++p)
    want += "\n  rank " + std::to_string(p) + ": allocation #0 of " + (p == 1 ? "32" : "16") + " bytes";
  try {
    empty_symmetric({r.rank() == 1 ? 8 : 4}, DType::f32, name);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
    EXPECT_EQ(std::string(e.what()), want);
  }
}

// Note [mpi shared memory room]: a heap larger than /dev/shm raises the same System error on
// every rank, naming need and free bytes, before MPI is asked (it was MPI_ERR_INTERN on one rank
// and a hang of the others, past MPI_Finalize); the world goes on.
TEST(MpiRuntime, AHeapLargerThanDevShmRaisesOnEveryRankNamingTheRoom) {
  Runtime& r = rt();
  std::string name = fresh_group("room");
  const int64_t elems = int64_t(1) << 46;  // 256 TiB of f32 per rank
  try {
    empty_symmetric({elems}, DType::f32, name);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::System);
    const std::string m = e.what();
    const std::string head = fmt::format(
        "empty_symmetric: host shared memory 'heap:{}:0' ({} bytes per rank, one segment of {} "
        "bytes for the {} ranks of the host) does not fit:\n  rank 0: out of shared memory in "
        "/dev/shm: need {} bytes, free ",
        name, elems * 4, elems * 4 * r.world_size(), r.world_size(), elems * 4 * r.world_size());
    EXPECT_EQ(m.rfind(head, 0), 0u) << m;
    EXPECT_NE(m.find(fmt::format("\n  rank {}: out of shared memory", r.world_size() - 1)),
              std::string::npos)
        << m;
  }
  // A heap that fits, in the same group, still works.
  Tensor t = empty_symmetric({4}, DType::f32, name);
  r.group(name)->barrier(0, "after room");
  EXPECT_EQ(t.numel(), 4);
}

TEST(MpiRuntime, DifferentCollectivesAreDetected) {
  Runtime& r = rt();
  std::string name = fresh_group("diff");
  try {
    if (r.rank() == 0) r.new_group("never", all_ranks());
    else empty_symmetric({4}, DType::f32, name);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
    std::string msg = e.what();
    EXPECT_NE(msg.find("are not in the same collective (different order or different calls):\n"
                       "  rank 0: new_group\n  rank 1: group:" + name + ":"),
              std::string::npos)
        << msg;
  }
}

TEST(MpiRuntime, UnknownGroupAndChannelOutOfRange) {
  try {
    empty_symmetric({4}, DType::f32, "tp");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("unknown group 'tp' (known: ", 0), 0u) << e.what();
  }
  try {
    rt().group("world")->barrier(16, "symm_mem::barrier");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "symm_mem::barrier: channel 16 out of range for group 'world' (valid: "
                           "0..15; set SYMMFLOW_SIGNAL_CHANNELS for more)");
  }
}

// Rank agreement (Note [rank agreement] in src/exec/agreement.cpp): each process compiles the
// program; rank 1 binds another shape of the same size; every rank raises naming the input.
TEST(MpiRuntime, RankAgreementNamesTheInputAndEveryRanksBinding) {
  Runtime& r = rt();
  ir::ParseOptions o;
  o.filename = "agree.sf";
  o.world_size = r.world_size();
  auto plan = passes::compile(ir::parse_graph(R"sf(group agree_tp
graph agree(x: f32[8, 4]) {
  r = symm_mem::one_shot_all_reduce(x, "sum", "agree_tp")
  return r
}
)sf", o));
  exec::Executable exe(plan);
  Tensor x = Tensor::full({8, 4}, DType::f32, 1.0);
  EXPECT_EQ(exe.run({x})[0].data<float>()[31], float(r.world_size()));
  EXPECT_EQ(exe.run({x})[0].data<float>()[0], float(r.world_size()));
  EXPECT_EQ(exe.agreement_exchanges(), 2u);  // the plan, then the first run's binding
  std::string others = r.world_size() == 2 ? "rank 0 binds" : "ranks 0, 2, 3 bind";
  std::string error = "<no error>";
  exec::Executable fresh(plan);  // its first run exchanges on every rank
  try {
    fresh.run({r.rank() == 1 ? Tensor::full({4, 8}, DType::f32, 1.0) : x});
  } catch (const Error& e) {
    error = e.what();  // caught: the world stays usable
  }
  EXPECT_EQ(error,
            "run: the ranks of program 'agree' bind different inputs (rank agreement):\n  input "
            "'x' (agree.sf:2): " + others + " f32[8, 4] strides [4, 1], rank 1 binds f32[4, 8] "
            "strides [8, 1]");
}

TEST(MpiFailure, RankThatThrowsFailsPeersFast) {
  set_timeout(20);
  Runtime& r = rt();
  int last = r.world_size() - 1;
  auto start = std::chrono::steady_clock::now();
  std::exception_ptr err = run_rank([&] {
    if (r.rank() == last) throw Error(ErrorCode::InvalidUsage, "boom");
    r.group("world")->barrier(0, "symm_mem::one_shot_all_reduce");
  });
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took, 5.0);  // far below the 20 s timeout
  if (r.rank() == last) {
    EXPECT_EQ(message_of(err), "boom");
  } else {
    EXPECT_EQ(code_of(err), ErrorCode::PeerFailure);
    // While it waited, or at its call when the failure came first (Note [poisoned groups]).
    const std::string head = "symm_mem::one_shot_all_reduce: rank " + std::to_string(last) +
                             " failed (boom) ";
    const std::string me = std::to_string(r.rank());
    const std::string m = message_of(err);
    EXPECT_TRUE(m.rfind(head + "while rank " + me + " waited", 0) == 0 ||
                m == head + "before rank " + me + " called; the world is poisoned, so no call of "
                                                  "group 'world' runs")
        << m;
  }
}

TEST(MpiFailure, RankThatNeverArrivesTimesOutNamingIt) {
  set_timeout(0.3);
  Runtime& r = rt();
  int last = r.world_size() - 1;
  std::exception_ptr err = run_rank([&] {
    if (r.rank() == last) return;  // never calls the barrier
    r.group("world")->barrier(0, "symm_mem::one_shot_all_reduce");
  });
  if (r.rank() == last) {
    EXPECT_FALSE(err);
    std::this_thread::sleep_for(std::chrono::seconds(1));  // stay alive while peers time out
    return;
  }
  std::string msg = message_of(err), me = std::to_string(r.rank()), l = std::to_string(last);
  if (code_of(err) == ErrorCode::Timeout) {
    EXPECT_EQ(msg, "symm_mem::one_shot_all_reduce: timed out after 0.3 s in group 'world' on rank " +
                       me + " waiting for rank " + l);
  } else {
    EXPECT_EQ(code_of(err), ErrorCode::PeerFailure) << msg;
    EXPECT_NE(msg.find("waited for rank " + l + " in group 'world'"), std::string::npos) << msg;
  }
}

TEST(MpiTimeout, BootstrapExchangeNamesTheMissingRank) {
  // The last rank never joins new_group: the others' exchange times out naming it (found through
  // the progress words of the host's control block).
  set_timeout(0.3);
  Runtime& r = rt();
  int last = r.world_size() - 1;
  if (r.rank() == last) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    return;
  }
  try {
    r.new_group("late", all_ranks());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout);
    EXPECT_EQ(std::string(e.what()), "new_group: timed out after 0.3 s on rank " +
                                         std::to_string(r.rank()) + " waiting for rank " +
                                         std::to_string(last));
  }
}

}  // namespace
}  // namespace symmflow::testing
