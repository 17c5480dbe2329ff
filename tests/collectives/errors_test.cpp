// Bad input to the cpu collectives, each asserting the exact error text; debug_collectives
// mismatches; the multimem refusal; and the failure of a rank in the middle of an all-reduce
// (FAILURE_MODES rows 1, 2, 3, 5, 7, 8).
#include <chrono>

#include <gtest/gtest.h>

#include "collectives/workspace.hpp"
#include "support/errors.hpp"
#include "symmflow/kernels/collectives.hpp"
#include "symmflow/ops/call.hpp"

namespace symmflow::testing {
namespace {

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


// Runs fn on `world` ranks after registering the ops on this thread.
void on_ranks(int world, const std::function<void(Runtime&)>& fn) {
  Registry::global();
  run_threads(world, fn, ThreadsOptions{5});
}

TEST(CollectiveErrors, SymmetricArgumentsAndGroups) {
  on_ranks(2, [](Runtime& rt) {
    rt.new_group("a", {0, 1});
    rt.new_group("b", {0, 1});
    Tensor plain = Tensor::empty({4}, DType::f32);
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::one_shot_all_reduce", {plain, "sum", "a"});
              }),
              "symm_mem::one_shot_all_reduce: argument 'input' is not in symmetric memory; "
              "allocate it with symmflow::empty_symmetric(shape, dtype, \"a\") or let the "
              "compiler place it");
    // Note [empty symmetric arguments]: an empty tensor is named for what it is.
    for (const char* op : {"symm_mem::one_shot_all_reduce", "symm_mem::two_shot_all_reduce_"}) {
      Tensor empty_plain = Tensor::empty({0, 3}, DType::bf16);
      EXPECT_EQ(usage_error_of([&] { call(op, {empty_plain, "sum", "a"}); }),
                fmt::format("argument 'input' of {} (bf16[0, 3]) has no elements, and a tensor "
                            "without elements carries no symmetric memory (PyTorch keeps no "
                            "storage for it): a collective of 0 elements moves nothing; skip the "
                            "call (Note [empty symmetric arguments])",
                            op));
    }
    // An empty symmetric tensor (its heap known, as from C++) runs.
    Tensor empty_symm = empty_symmetric({0}, DType::f32, "a");
    EXPECT_EQ(call("symm_mem::one_shot_all_reduce", {empty_symm, "sum", "a"}).to_tensor().numel(),
              0);
    Tensor in_a = empty_symmetric({4}, DType::f32, "a");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::two_shot_all_reduce_", {in_a, "sum", "b"});
              }),
              "symm_mem::two_shot_all_reduce_: argument 'input' was allocated in group 'a' but "
              "the op runs on group 'b'");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::all_gather_out", {in_a, "nope", Tensor::empty({8}, DType::f32)});
              }),
              "symm_mem::all_gather_out: unknown group 'nope' (known: a, b, world)");
    Tensor strided = in_a.as_strided({2}, {2}, 0);
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::one_shot_all_reduce", {strided, "sum", "a"});
              }),
              "symm_mem::one_shot_all_reduce: symmetric argument 'input' (f32[2] with strides "
              "[2]) must be contiguous: peers address it at the same offsets; make it contiguous "
              "first");
    // A group destroyed and made again: the old tensors belong to the destroyed one.
    rt.destroy_group("a");
    rt.new_group("a", {0, 1});
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::one_shot_all_reduce", {in_a, "sum", "a"});
              }),
              "symm_mem::one_shot_all_reduce: group 'a' was destroyed; create it again with "
              "new_group");
  });
}

TEST(CollectiveErrors, ReduceOpsDtypesAndShapes) {
  on_ranks(2, [](Runtime& rt) {
    Tensor x = empty_symmetric({4}, DType::f32, "world");
    EXPECT_EQ(
        usage_error_of([&] {
          call("symm_mem::one_shot_all_reduce", {x, "prod", "world"});
        }),
        "symm_mem::one_shot_all_reduce: unknown reduce_op 'prod' (valid: sum, avg, max, min)");
    Tensor i8 = empty_symmetric({4}, DType::i8, "world");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::one_shot_all_reduce", {i8, "sum", "world"});
              }),
              "symm_mem::one_shot_all_reduce: dtype i8 is not supported on cpu (supported: f32, "
              "bf16, f16, f64, i32, i64)");
    Tensor u32 = empty_symmetric({4}, DType::u32, "world");
    EXPECT_EQ(usage_error_of([&] { all_reduce(u32, "max", "world"); }),
              "symmflow::all_reduce: dtype u32 is not supported on cpu (supported: f32, bf16, "
              "f16, f64, i32, i64)");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::one_shot_all_reduce_out",
                     {x, "sum", "world", Tensor::empty({5}, DType::f32)});
              }),
              "symm_mem::one_shot_all_reduce_out: argument 'out' is f32[5] but must be f32[4] "
              "(like 'input')");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::two_shot_all_reduce_out",
                     {x, "sum", "world", Tensor::empty({4}, DType::bf16)});
              }),
              "symm_mem::two_shot_all_reduce_out: argument 'output' is bf16[4] but must be "
              "f32[4] (like 'input')");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::one_shot_all_reduce_copy",
                     {x, Tensor::empty({6}, DType::f32), "sum", "world"});
              }),
              "symm_mem::one_shot_all_reduce_copy: argument 'symm_buffer' (f32[4]) holds fewer "
              "elements than 'local_input' (f32[6])");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::one_shot_all_reduce_out", {x, "sum", "world", x});
              }),
              "symm_mem::one_shot_all_reduce_out: argument 'out' overlaps argument 'input' in "
              "memory; peers read 'input' while this rank writes 'out', so they must be separate "
              "buffers");
    Tensor m = empty_symmetric({3, 4}, DType::f32, "world");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::reduce_scatter_out",
                     {m, "world", false, Tensor::empty({1, 4}, DType::f32)});
              }),
              "symm_mem::reduce_scatter_out: dim 0 of argument 'input' (f32[3, 4]) is not "
              "divisible by the group size 2");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::reduce_scatter_out",
                     {m, "world", true, Tensor::empty({3, 3}, DType::f32)});
              }),
              "symm_mem::reduce_scatter_out: argument 'output' is f32[3, 3] but must be f32[3, 2] "
              "('input' split 2 ways along dim 1)");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::all_gather_out", {m, "world", Tensor::empty({3, 4}, DType::f32)});
              }),
              "symm_mem::all_gather_out: argument 'out' is f32[3, 4] but must be f32[6, 4] "
              "('input' gathered from 2 ranks along dim 0)");
    rt.group("world")->barrier(0, "test");
  });
}

TEST(CollectiveErrors, ChannelsPeersAndU32Writes) {
  on_ranks(2, [](Runtime& rt) {
    Tensor x = empty_symmetric({4}, DType::f32, "world");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::barrier", {"world", int64_t(16)});
              }),
              "symm_mem::barrier: channel 16 out of range for group 'world' (valid: 0..15; set "
              "SYMMFLOW_SIGNAL_CHANNELS for more)");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::put_signal", {x, x, int64_t(1), int64_t(-1), "world"});
              }),
              "symm_mem::put_signal: channel -1 out of range for group 'world' (valid: 0..15; set "
              "SYMMFLOW_SIGNAL_CHANNELS for more)");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::wait_signal", {x, int64_t(2), int64_t(0), "world"});
              }),
              "symm_mem::wait_signal: peer 2 out of range for group 'world' of size 2");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::broadcast_", {x, int64_t(5), "world"});
              }),
              "symm_mem::broadcast_: root 5 out of range for group 'world' of size 2");
    Tensor u = Tensor::empty({4}, DType::u32);
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::stream_write_value32_", {u, int64_t(4), int64_t(1)});
              }),
              "symm_mem::stream_write_value32_: offset 4 and count 1 out of bounds for 'input' of "
              "4 elements");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::memset32_", {u, int64_t(1), int64_t(1), int64_t(4)});
              }),
              "symm_mem::memset32_: offset 1 and count 4 out of bounds for 'input' of 4 elements");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::memset32_", {u, int64_t(0), int64_t(-1), int64_t(1)});
              }),
              "symm_mem::memset32_: val -1 is out of the u32 range [0, 4294967295]");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::memset32_", {x, int64_t(0), int64_t(1), int64_t(1)});
              }),
              "symm_mem::memset32_: argument 'input' (f32[4]) must be a contiguous u32 tensor");
  });
}

TEST(CollectiveErrors, MultimemIsRefusedWithAnAlternative) {
  on_ranks(1, [](Runtime&) {
    Tensor x = empty_symmetric({4}, DType::f32, "world");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::multimem_all_reduce_", {x, "sum", "world"});
              }),
              "symm_mem::multimem_all_reduce_: needs NVLink multicast, which the cpu backend "
              "lacks; use symm_mem::two_shot_all_reduce_ (or symm_mem::one_shot_all_reduce) "
              "instead");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::multimem_one_shot_all_reduce", {x, "sum", "world"});
              }),
              "symm_mem::multimem_one_shot_all_reduce: needs NVLink multicast, which the cpu "
              "backend lacks; use symm_mem::one_shot_all_reduce (or "
              "symm_mem::two_shot_all_reduce_ for large tensors) instead");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::multimem_one_shot_all_reduce_out",
                     {x, "sum", "world", Tensor::empty({4}, DType::f32)});
              }),
              "symm_mem::multimem_one_shot_all_reduce_out: needs NVLink multicast, which the cpu "
              "backend lacks; use symm_mem::one_shot_all_reduce_out (or "
              "symm_mem::two_shot_all_reduce_out for large tensors) instead");
    EXPECT_EQ(
        usage_error_of([&] {
          call("symm_mem::multimem_all_gather_out", {x, "world", Tensor::empty({4}, DType::f32)});
        }),
        "symm_mem::multimem_all_gather_out: needs NVLink multicast, which the cpu backend "
        "lacks; use symm_mem::all_gather_out instead");
  });
}

TEST(CollectiveErrors, AllToAllBadSplitsFailOnEveryRank) {
  Registry::global();
  auto errors = run_threads_collect(
      2,
      [](Runtime& rt) {
        Tensor in = empty_symmetric({4, 2}, DType::f32, "world");
        Tensor out = empty_symmetric({4, 2}, DType::f32, "world");
        Tensor splits = empty_symmetric({2}, DType::i64, "world");
        Tensor meta = empty_symmetric({2, 2}, DType::i64, "world");
        splits.data<int64_t>()[0] = 3;
        splits.data<int64_t>()[1] = rt.rank() == 1 ? 2 : 1;  // rank 1 sends 5 rows of 4
        call("symm_mem::all_to_all_vdev", {in, out, splits, meta, "world"});
      },
      ThreadsOptions{5});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(message_of(errors[size_t(r)]),
              "symm_mem::all_to_all_vdev: rank 1 sends 5 rows in total but 'input' has 4 rows");
  }
}

TEST(CollectiveErrors, DebugCollectivesListsEveryRanksCall) {
  Registry::global();
  Tunables t = tunables();
  t.debug_collectives = true;
  ScopedTunables debug(t);
  // Row 2: a different numel on one rank (same heap, a shorter view).
  auto errors = run_threads_collect(
      3,
      [](Runtime& rt) {
        auto heap = SymmetricHeap::allocate(rt.group("world"), 64);
        Tensor x = symmetric_tensor(heap, 4, {rt.rank() == 1 ? 3 : 4}, DType::f32);
        call("symm_mem::one_shot_all_reduce", {x, "sum", "world"});
      },
      ThreadsOptions{5});
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(message_of(errors[size_t(r)]),
              "symm_mem::one_shot_all_reduce: ranks of group 'world' issued different collectives "
              "(debug_collectives):\n"
              "  rank 0: symm_mem::one_shot_all_reduce sum f32 x 4\n"
              "  rank 1: symm_mem::one_shot_all_reduce sum f32 x 3\n"
              "  rank 2: symm_mem::one_shot_all_reduce sum f32 x 4");
  }
  // Row 8: ranks issue different collectives.
  errors = run_threads_collect(
      2,
      [](Runtime& rt) {
        Tensor x = empty_symmetric({8}, DType::bf16, "world");
        if (rt.rank() == 0)
          call("symm_mem::two_shot_all_reduce_", {x, "max", "world"});
        else
          call("symm_mem::broadcast_", {x, int64_t(0), "world"});
      },
      ThreadsOptions{5});
  EXPECT_EQ(message_of(errors[0]),
            "symm_mem::two_shot_all_reduce_: ranks of group 'world' issued different collectives "
            "(debug_collectives):\n"
            "  rank 0: symm_mem::two_shot_all_reduce_ max bf16 x 8\n"
            "  rank 1: symm_mem::broadcast_ root=0 bf16 x 8");
  EXPECT_NE(message_of(errors[1]).find("  rank 0: symm_mem::two_shot_all_reduce_ max bf16 x 8"),
            std::string::npos);
}

// The failure test: 4 ranks on threads, rank 3 stops in the middle of an all-reduce.
TEST(CollectiveFailure, RankStopsInTheMiddleOfAnAllReduce) {
  Registry::global();
  constexpr std::string_view kOp = "symm_mem::one_shot_all_reduce";
  // 64 Ki floats read in place between two barriers; 1 Ki floats go through the group's staging
  // with a single barrier (Note [one-shot staging]), so there the "middle" is before it.
  for (auto [numel, throws] : {std::pair{int64_t(65536), false}, std::pair{int64_t(65536), true},
                               std::pair{int64_t(1024), false}, std::pair{int64_t(1024), true}}) {
    SCOPED_TRACE(fmt::format("numel {}, rank 3 {}", numel, throws ? "throws" : "returns"));
    auto start = std::chrono::steady_clock::now();
    auto errors = run_threads_collect(
        4,
        [&, numel = numel, throws = throws](Runtime& rt) {
          Tensor x = empty_symmetric({numel}, DType::f32, "world");
          call(kOp, {x, "sum", "world"});  // one complete all-reduce first
          if (rt.rank() == 3) {
            // Rank 3 enters the next all-reduce (passing its first barrier where it has two), then
            // stops: it returns (its peers are told it finished) or throws (a crash).
            if (numel == 65536)
              rt.group("world")->barrier(0, CollectiveCall{kOp, "sum", DType::f32, numel});
            if (throws) throw Error(ErrorCode::System, "rank 3 crashed");
            return;
          }
          call(kOp, {x, "sum", "world"});
        },
        ThreadsOptions{0.5});
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(took, 4.0);
    if (throws) {
      EXPECT_EQ(message_of(errors[3]), "rank 3 crashed");
    } else {
      EXPECT_FALSE(errors[3]) << message_of(errors[3]);
    }
    for (int r : {0, 1, 2}) {
      std::string msg = message_of(errors[size_t(r)]);
      ASSERT_TRUE(errors[size_t(r)]) << "rank " << r << " finished without an error";
      EXPECT_EQ(msg.rfind(std::string(kOp) + ": ", 0), 0u) << msg;
      if (throws) {
        EXPECT_EQ(code_of(errors[size_t(r)]), ErrorCode::PeerFailure) << msg;
        // Usually "... waited for rank 3"; a rank still waiting for a slow live peer when the
        // failure lands names that peer as the one it waited for, and rank 3 as the failed one;
        // a rank that calls after the failure is refused at once ("... before rank r called",
        // Note [poisoned groups]).
        EXPECT_TRUE(msg.rfind(fmt::format("{}: rank 3 failed (rank 3 crashed) while rank {} "
                                          "waited for rank ",
                                          kOp, r),
                              0) == 0 ||
                    msg == fmt::format("{}: rank 3 failed (rank 3 crashed) before rank {} called; "
                                       "the world is poisoned, so no call of group 'world' runs",
                                       kOp, r))
            << msg;
      } else {
        // A rank that returned is named at once (Note [peers that left] in group.hpp); a rank
        // still waiting for a live peer that failed first names that one, and rank 3 within.
        EXPECT_EQ(code_of(errors[size_t(r)]), ErrorCode::PeerFailure) << msg;
        EXPECT_NE(msg.find(fmt::format("{}: rank 3 has finished (it left the world cleanly) while "
                                       "rank ",
                                       kOp)),
                  std::string::npos)
            << msg;
      }
    }
  }
  // The process goes on: a fresh world runs collectives normally.
  on_ranks(4, [](Runtime& rt) {
    Tensor x = empty_symmetric({5}, DType::i32, "world");
    for (int i = 0; i < 5; ++i) x.data<int32_t>()[i] = rt.rank() + i;
    all_reduce(x, "sum", "world");
    for (int i = 0; i < 5; ++i) EXPECT_EQ(x.data<int32_t>()[i], 6 + 4 * i);
  });
}

}  // namespace
}  // namespace symmflow::testing
