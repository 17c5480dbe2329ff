// Collective agreement (Note [collective agreement] in src/runtime/agreement.cpp): ranks that call
// a collective with another reduce op, dtype, element count, root, shift or op raise the same
// InvalidUsage on every rank, naming the field and each rank's value, by default and before any
// data moves; the group stays usable afterwards; SYMMFLOW_COLLECTIVE_AGREEMENT=0 restores the
// silent behaviour (shown, so that the tests here are seen to fail without the check).
#include <gtest/gtest.h>

#include "collectives/workspace.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/kernels/collectives.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/passes/pipeline.hpp"

namespace symmflow::testing {
namespace {

std::string message_of(const std::exception_ptr& p) {
  if (!p) return "<no error>";
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    return e.code() == ErrorCode::InvalidUsage ? e.what()
                                                : std::string("<not InvalidUsage> ") + e.what();
  } catch (const std::exception& e) {
    return std::string("<not a symmflow::Error> ") + e.what();
  }
}

// Every rank's error after fn ran on `world` ranks (short timeout: a hang fails fast).
std::vector<std::string> errors_of(int world, const std::function<void(Runtime&)>& fn) {
  Registry::global();
  std::vector<std::string> out;
  for (const std::exception_ptr& e : run_threads_collect(world, fn, ThreadsOptions{5}))
    out.push_back(message_of(e));
  return out;
}

void expect_all(const std::vector<std::string>& got, const std::string& want) {
  for (size_t r = 0; r < got.size(); ++r) EXPECT_EQ(got[r], want) << "rank " << r;
}

TEST(CollectiveAgreement, ReduceOpsThatDifferAreNamedOnEveryRank) {
  auto errors = errors_of(2, [](Runtime& rt) {
    Tensor x = empty_symmetric({4}, DType::f32, "world");
    call("symm_mem::one_shot_all_reduce", {x, rt.rank() == 0 ? "sum" : "max", "world"});
  });
  expect_all(errors,
             "symm_mem::one_shot_all_reduce: the ranks of group 'world' disagree on reduce op "
             "(collective agreement; no data was exchanged):\n"
             "  reduce op: sum on rank 0; max on rank 1");
}

TEST(CollectiveAgreement, DtypesOfOneByteSizeAreNamed) {
  // f32 and i32 views of one heap: the same bytes, so only the dtype tells them apart.
  for (int64_t numel : {int64_t(4), int64_t(8192)}) {  // staged one-shot, and in place
    SCOPED_TRACE(numel);
    auto errors = errors_of(3, [numel](Runtime& rt) {
      auto heap = SymmetricHeap::allocate(rt.group("world"), size_t(numel) * 4);
      Tensor x = symmetric_tensor(heap, 0, {numel}, rt.rank() == 1 ? DType::i32 : DType::f32);
      call("symm_mem::one_shot_all_reduce", {x, "sum", "world"});
    });
    expect_all(errors,
               "symm_mem::one_shot_all_reduce: the ranks of group 'world' disagree on dtype "
               "(collective agreement; no data was exchanged):\n"
               "  dtype: f32 on ranks 0, 2; i32 on rank 1");
  }
}

TEST(CollectiveAgreement, CountsAndOpsThatDifferAreNamed) {
  auto errors = errors_of(2, [](Runtime& rt) {
    auto heap = SymmetricHeap::allocate(rt.group("world"), 64);
    Tensor x = symmetric_tensor(heap, 0, {rt.rank() == 0 ? 16 : 15}, DType::bf16);
    call("symm_mem::two_shot_all_reduce_", {x, "sum", "world"});
  });
  expect_all(errors,
             "symm_mem::two_shot_all_reduce_: the ranks of group 'world' disagree on element "
             "count (collective agreement; no data was exchanged):\n"
             "  element count: 16 on rank 0; 15 on rank 1");
  errors = errors_of(2, [](Runtime& rt) {
    Tensor x = empty_symmetric({8}, DType::f32, "world");
    if (rt.rank() == 0)
      call("symm_mem::two_shot_all_reduce_", {x, "max", "world"});
    else
      call("symm_mem::broadcast_", {x, int64_t(0), "world"});
  });
  const std::string fields =
      " disagree on op, reduce op, argument (collective agreement; no data was exchanged):\n"
      "  op: symm_mem::two_shot_all_reduce_ on rank 0; symm_mem::broadcast_ on rank 1\n"
      "  reduce op: max on rank 0; - on rank 1\n"
      "  argument: - on rank 0; root=0 on rank 1";
  EXPECT_EQ(errors[0], "symm_mem::two_shot_all_reduce_: the ranks of group 'world'" + fields);
  EXPECT_EQ(errors[1], "symm_mem::broadcast_: the ranks of group 'world'" + fields);
}

TEST(CollectiveAgreement, RootsShiftsAndRowsThatDifferAreNamed) {
  auto errors = errors_of(2, [](Runtime& rt) {
    Tensor x = empty_symmetric({8}, DType::f32, "world");
    call("symm_mem::broadcast_", {x, int64_t(rt.rank()), "world"});
  });
  expect_all(errors,
             "symm_mem::broadcast_: the ranks of group 'world' disagree on argument (collective "
             "agreement; no data was exchanged):\n"
             "  argument: root=0 on rank 0; root=1 on rank 1");
  errors = errors_of(2, [](Runtime& rt) {
    Tensor x = empty_symmetric({8}, DType::f32, "world");
    call("symm_mem::reduce_out", {x, int64_t(rt.rank()), "sum", "world",
                                  Tensor::empty({8}, DType::f32)});
  });
  expect_all(errors,
             "symm_mem::reduce_out: the ranks of group 'world' disagree on argument (collective "
             "agreement; no data was exchanged):\n"
             "  argument: root=0 on rank 0; root=1 on rank 1");
  errors = errors_of(2, [](Runtime& rt) {
    Tensor x = empty_symmetric({8}, DType::f32, "world");
    call("symm_mem::collective_permute", {x, int64_t(rt.rank() + 1), "world"});
  });
  expect_all(errors,
             "symm_mem::collective_permute: the ranks of group 'world' disagree on argument "
             "(collective agreement; no data was exchanged):\n"
             "  argument: shift=1 on rank 0; shift=2 on rank 1");
  errors = errors_of(2, [](Runtime& rt) {
    const int64_t cols = rt.rank() == 0 ? 4 : 2;  // one heap, rows of 4 or of 2 elements
    auto heap = SymmetricHeap::allocate(rt.group("world"), 256);
    Tensor in = symmetric_tensor(heap, 0, {8 / cols, cols}, DType::f32);
    Tensor out = symmetric_tensor(heap, 64, {16 / cols, cols}, DType::f32);
    Tensor splits = symmetric_tensor(heap, 128, {2}, DType::i64);
    Tensor meta = symmetric_tensor(heap, 192, {2, 2}, DType::i64);
    call("symm_mem::all_to_all_vdev", {in, out, splits, meta, "world"});
  });
  expect_all(errors,
             "symm_mem::all_to_all_vdev: the ranks of group 'world' disagree on argument "
             "(collective agreement; no data was exchanged):\n"
             "  argument: row_elements=4 on rank 0; row_elements=2 on rank 1");
}

TEST(CollectiveAgreement, ReduceScatterAndAllGatherAreChecked) {
  auto errors = errors_of(2, [](Runtime& rt) {
    auto heap = SymmetricHeap::allocate(rt.group("world"), 64);
    DType t = rt.rank() == 0 ? DType::f32 : DType::i32;
    Tensor x = symmetric_tensor(heap, 0, {8}, t);
    call("symm_mem::reduce_scatter_out", {x, "world", false, Tensor::empty({4}, t)});
  });
  expect_all(errors,
             "symm_mem::reduce_scatter_out: the ranks of group 'world' disagree on dtype "
             "(collective agreement; no data was exchanged):\n"
             "  dtype: f32 on rank 0; i32 on rank 1");
  errors = errors_of(2, [](Runtime& rt) {
    auto heap = SymmetricHeap::allocate(rt.group("world"), 64);
    int64_t n = rt.rank() == 0 ? 4 : 3;
    Tensor x = symmetric_tensor(heap, 0, {n}, DType::f32);
    call("symm_mem::all_gather_out", {x, "world", Tensor::empty({2 * n}, DType::f32)});
  });
  expect_all(errors,
             "symm_mem::all_gather_out: the ranks of group 'world' disagree on element count "
             "(collective agreement; no data was exchanged):\n"
             "  element count: 4 on rank 0; 3 on rank 1");
}

TEST(CollectiveAgreement, APlainBarrierMeetingACollectiveFailsOnBothSides) {
  auto errors = errors_of(2, [](Runtime& rt) {
    Tensor x = empty_symmetric({4}, DType::f32, "world");
    if (rt.rank() == 0)
      call("symm_mem::one_shot_all_reduce", {x, "sum", "world"});
    else
      rt.group("world")->barrier(0, "Executable::run");
  });
  const std::string fields =
      " disagree on op, reduce op, dtype, element count (collective agreement; no data was "
      "exchanged):\n"
      "  op: symm_mem::one_shot_all_reduce on rank 0; a plain barrier (Executable::run) on rank "
      "1\n"
      "  reduce op: sum on rank 0; - on rank 1\n"
      "  dtype: f32 on rank 0; - on rank 1\n"
      "  element count: 4 on rank 0; - on rank 1";
  EXPECT_EQ(errors[0], "symm_mem::one_shot_all_reduce: the ranks of group 'world'" + fields);
  EXPECT_EQ(errors[1], "Executable::run: the ranks of group 'world'" + fields);
}

// At 8 ranks one odd rank is named among the others, nothing is reduced, and the group works on.
// Note [poisoned groups]: after a disagreement the group is unusable on every rank (the one that
// differed and the seven that did not): each of 100 later calls raises before anything moves,
// naming the first error, its rank and time; a new group of the same ranks then gives the right
// sums. The input is untouched throughout.
TEST(CollectiveAgreement, EightRanksOneDiffersAndTheGroupIsPoisoned) {
  ScopedTunables fast(oversubscribed_tunables());
  auto errors = errors_of(8, [](Runtime& rt) {
    Tensor x = empty_symmetric({6}, DType::i32, "world");
    for (int i = 0; i < 6; ++i) x.data<int32_t>()[i] = rt.rank() + 1;
    const std::string first =
        "symmflow::all_reduce: the ranks of group 'world' disagree on reduce op (collective "
        "agreement; no data was exchanged):\n"
        "  reduce op: sum on ranks 0, 1, 2, 3, 4, 6, 7; min on rank 5";
    try {
      all_reduce(x, rt.rank() == 5 ? "min" : "sum", "world");
      fail("no error");
    } catch (const Error& e) {
      if (e.code() != ErrorCode::InvalidUsage || std::string(e.what()) != first) throw;
    }
    for (int call = 0; call < 100; ++call) {
      try {
        all_reduce(x, "sum", "world");
        fail(fmt::format("call {} after the disagreement returned", call));
      } catch (const Error& e) {
        const std::string m = e.what();
        // The first error is this rank's own (every rank saw the disagreement).
        const std::string head = fmt::format(
            "symmflow::all_reduce: group 'world' is poisoned: a collective failed on rank {} at ",
            rt.rank());
        if (e.code() != ErrorCode::InvalidUsage || m.rfind(head, 0) != 0 ||
            m.find(" UTC (" + first + "); no later call of the group runs") == std::string::npos)
          throw;
      }
    }
    for (int i = 0; i < 6; ++i)
      if (x.data<int32_t>()[i] != rt.rank() + 1) fail("the input changed");
    // Recovery: a new group of the same ranks.
    rt.new_group("again", {0, 1, 2, 3, 4, 5, 6, 7});
    Tensor y = empty_symmetric({6}, DType::i32, "again");
    for (int i = 0; i < 6; ++i) y.data<int32_t>()[i] = rt.rank() + 1;
    all_reduce(y, "sum", "again");
    for (int i = 0; i < 6; ++i)
      if (y.data<int32_t>()[i] != 36) fail(fmt::format("sum {}", y.data<int32_t>()[i]));
  });
  expect_all(errors, "<no error>");
}

// Note [program steps in agreement]: two compiled programs whose all-reduces look alike (same
// op, dtype, count and group), called in a different order per rank, used to pair c1's all-reduce
// with c2's and return wrong sums on both ranks; now every rank raises naming each rank's program
// and step.
TEST(CollectiveAgreement, TwoProgramsCalledInAnotherOrderPerRankAreNamed) {
  auto program = [](const char* name, const char* local) {
    return fmt::format(
        "group tp\ngraph {}(x: f32[8]) {{\n  y = {}\n"
        "  z = symm_mem::one_shot_all_reduce(y, \"sum\", \"tp\")\n  return z\n}}\n",
        name, local);
  };
  ir::ParseOptions o;
  o.world_size = 2;
  auto c1 = passes::compile(ir::parse_graph(program("c1", "aten::mul.Scalar(x, 2.0)"), o));
  auto c2 = passes::compile(ir::parse_graph(program("c2", "aten::add.Scalar(x, 1.0, 1)"), o));
  auto errors = errors_of(2, [&](Runtime& rt) {
    exec::Executable e1(c1), e2(c2);
    const Tensor x = Tensor::from_vector(std::vector<float>(8, float(rt.rank() + 1)), {8});
    // The same order first: right sums (2 + 4, and 2 + 3).
    if (e1.run({x})[0].data<float>()[0] != 6.0f || e2.run({x})[0].data<float>()[0] != 5.0f)
      fail("wrong sums in the same order");
    if (rt.rank() == 0) {
      e1.run({x});
    } else {
      e2.run({x});
    }
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& m = errors[size_t(r)];
    EXPECT_EQ(m.rfind("symm_mem::one_shot_all_reduce_out: the ranks of group 'tp' disagree on "
                      "program step (collective agreement; no data was exchanged):\n"
                      "  program step: c1 (",
                      0),
              0u)
        << m;
    EXPECT_NE(m.find(") step 1 on rank 0; c2 ("), std::string::npos) << m;
    EXPECT_NE(m.find(") step 1 on rank 1"), std::string::npos) << m;
  }
}

// Compiled plans run the same kernels: a broadcast whose root, an int literal, differs per rank
// passes the rank agreement (which leaves int literals out of the plan's hash: an SPMD program may
// name a peer by a literal that differs per rank) and is refused by the collective's.
TEST(CollectiveAgreement, ACompiledPlanIsCheckedToo) {
  auto program = [](int root) {
    return fmt::format(
        "group tp\ngraph bcast(x: f32[8]) {{\n  y = aten::mul.Scalar(x, 2.0)\n"
        "  symm_mem::broadcast_(y, {}, \"tp\")\n  return y\n}}\n",
        root);
  };
  ir::ParseOptions o;
  o.world_size = 2;
  std::vector<std::shared_ptr<const passes::Plan>> plans;
  for (int root : {0, 1}) plans.push_back(passes::compile(ir::parse_graph(program(root), o)));
  auto errors = errors_of(2, [&](Runtime& rt) {
    exec::Executable exe(plans[size_t(rt.rank())]);
    exe.run({Tensor::from_vector(std::vector<float>(8, float(rt.rank())), {8})});
  });
  expect_all(errors,
             "symm_mem::broadcast_: the ranks of group 'tp' disagree on argument (collective "
             "agreement; no data was exchanged):\n"
             "  argument: root=0 on rank 0; root=1 on rank 1");
}

// Without the check (the behaviour before it) the same call returns wrong values silently.
TEST(CollectiveAgreement, TurnedOffTheDisagreementPassesSilently) {
  Tunables t = tunables();
  t.collective_agreement = false;
  ScopedTunables off(t);
  auto errors = errors_of(2, [](Runtime& rt) {
    Tensor x = empty_symmetric({4}, DType::f32, "world");
    call("symm_mem::one_shot_all_reduce", {x, rt.rank() == 0 ? "sum" : "max", "world"});
  });
  expect_all(errors, "<no error>");
}

}  // namespace
}  // namespace symmflow::testing
