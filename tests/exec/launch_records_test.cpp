// Note [launch records] (exec/executable.cpp): every call step with a tensor operand runs from the
// record its first call prepared, run after run, on 1, 2 and 4 ranks; results stay the
// interpreter's; an op whose tensors come in a list only (cat) and a factory (arange) still run,
// placed per call; and no record keeps a caller's tensor alive after the run. Fused steps run
// from the program their first run prepared (Note [fused programs prepared once]); collectives
// from the group and reduce op their first call resolved (Note [prepared collectives]).
#include <gtest/gtest.h>

#include "support/graphs.hpp"
#include "support/tensors.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/interpret.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow {
namespace {

using exec::Executable;
using testing::make_input;

size_t call_steps_with_tensors(const passes::Plan& plan) {
  size_t n = 0;
  for (const passes::PlanStep& s : plan.steps) {
    if (s.kind != passes::StepKind::call && s.kind != passes::StepKind::functional) continue;
    bool tensor = false;
    for (const passes::Operand& a : s.args) tensor |= a.kind == passes::Operand::Kind::value;
    n += tensor;
  }
  return n;
}

class LaunchRecords : public ::testing::TestWithParam<int> {};

TEST_P(LaunchRecords, EveryCallStepRunsFromItsRecordRunAfterRun) {
  const int w = GetParam(), layers = 3;
  auto plan = testing::plan_text(testing::tp_mlp_text(layers, true), w);
  std::shared_ptr<const ir::Graph> source = testing::parse(testing::tp_mlp_text(layers, false), w);
  const size_t calls = call_steps_with_tensors(*plan);
  ASSERT_GE(calls, size_t(2 * layers));
  run_threads(w, [&](Runtime& rt) {
    Executable exe(plan);
    for (int seed = 0; seed < 3; ++seed) {
      std::vector<Tensor> in{make_input({16, 64}, DType::f32, rt.rank(), seed)};
      for (int l = 0; l < layers; ++l)
        in.push_back(make_input({64, 64}, DType::f32, rt.rank(), seed + 1 + l));
      std::vector<Tensor> got = exe.run(in);
      testing::expect_same(got[0], exec::interpret(*source, in)[0], "output");
      EXPECT_EQ(exe.last_stats().prepared_calls, calls) << "run " << seed;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, LaunchRecords, ::testing::Values(1, 2, 4));

// Note [prepared collectives] (kernels/cpu/collectives/args.hpp): a collective's group and
// reduce op are resolved by its record's first call and found there by every later run (a
// one-shot, a two-shot with another reduce op, and a barrier, which has no tensor operand), with
// the interpreter's results.
constexpr const char* kCollectives = R"sf(group tp
graph g(x: f32[8, 16]) {
  a = aten::mul.Scalar(x, 2.0)
  b = symm_mem::one_shot_all_reduce(a, "sum", "tp")
  c = aten::mul.Scalar(b, 0.5)
  symm_mem::two_shot_all_reduce_(c, "max", "tp")
  symm_mem::barrier("tp", 0)
  d = aten::add.Tensor(c, x)
  return d
}
)sf";

class PreparedCollectives : public ::testing::TestWithParam<int> {};

TEST_P(PreparedCollectives, GroupAndReduceOpComeFromTheRecordAfterTheFirstRun) {
  const int w = GetParam();
  std::shared_ptr<const passes::Plan> plan = passes::compile(testing::parse(kCollectives, w));
  std::shared_ptr<const ir::Graph> source = testing::parse(kCollectives, w);
  size_t collectives = 0;
  for (const passes::PlanStep& s : plan->steps)
    collectives += s.op.called() && s.op.called()->has(Tag::collective);
  ASSERT_EQ(collectives, 3u);
  run_threads(w, [&](Runtime& rt) {
    Executable exe(plan);
    for (int seed = 0; seed < 3; ++seed) {
      Tensor x = make_input({8, 16}, DType::f32, rt.rank(), seed);
      std::vector<Tensor> got = exe.run({x});
      testing::expect_same(got[0], exec::interpret(*source, {x})[0], "d");
      EXPECT_EQ(exe.last_stats().prepared_states, seed == 0 ? 0u : collectives)
          << "run " << seed << " on rank " << rt.rank();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, PreparedCollectives, ::testing::Values(1, 2, 3, 4));

constexpr const char* kListsAndFactories = R"sf(graph g(x: f32[3, 5], y: f32[3, 5]) {
  a = aten::add.Tensor(x, y)
  c = aten::cat([a, x, y], 0)
  r = aten::arange.start_step(0, 5)
  s = aten::mul.Scalar(c, 2.0)
  return s, r
}
)sf";

TEST(LaunchRecords, ListOperandsAndFactoriesRunAndHoldNoCallerTensor) {
  auto plan = testing::plan_text(kListsAndFactories);
  Executable exe(plan);
  for (int seed = 0; seed < 2; ++seed) {
    Tensor x = make_input({3, 5}, DType::f32, 0, seed), y = make_input({3, 5}, DType::f32, 0, 7);
    std::vector<Tensor> want = exec::interpret(*plan->graph, {x, y});
    std::vector<Tensor> got = exe.run({x, y});
    testing::expect_same(got[0], want[0], "s");
    testing::expect_same(got[1], want[1], "r (arange: placed per call, no record)");
    EXPECT_EQ(exe.last_stats().prepared_calls, 2u)
        << "add and mul; cat (a tensor list alone) and arange (no tensor) are placed per call";
    got.clear();
    EXPECT_EQ(x.storage().use_count(), 1) << "a record still holds input x";
    EXPECT_EQ(y.storage().use_count(), 1) << "a record still holds input y";
  }
}

constexpr const char* kFusedChain = R"sf(graph g(x: f32[8, 33], y: f32[8, 33], z: f32[33]) {
  a = aten::add.Tensor(x, y)
  b = aten::mul.Scalar(a, 2.0)
  c = aten::mul.Tensor(b, z)
  d = aten::neg(c)
  return d
}
)sf";

// Note [fused programs prepared once] (exec/fused.hpp): a fused step's region is prepared by the
// first run and later runs reuse it, on new tensors each time, with the interpreter's results;
// no program keeps the run's tensors alive.
TEST(LaunchRecords, FusedStepsRunFromTheProgramTheirFirstRunPrepared) {
  std::shared_ptr<const passes::Plan> plan = passes::compile(testing::parse(kFusedChain));
  std::shared_ptr<const ir::Graph> source = testing::parse(kFusedChain);
  size_t fused = 0;
  for (const passes::PlanStep& s : plan->steps) fused += s.kind == passes::StepKind::fused;
  ASSERT_EQ(fused, 1u) << "the chain is one fused region";
  Executable exe(plan);
  for (int seed = 0; seed < 3; ++seed) {
    Tensor x = make_input({8, 33}, DType::f32, 0, seed), y = make_input({8, 33}, DType::f32, 0, 7);
    Tensor z = make_input({33}, DType::f32, 0, seed + 3);
    std::vector<Tensor> want = exec::interpret(*source, {x, y, z});
    std::vector<Tensor> got = exe.run({x, y, z});
    testing::expect_same(got[0], want[0], "d");
    EXPECT_EQ(exe.last_stats().prepared_fused, seed == 0 ? 0u : 1u) << "run " << seed;
    got.clear();
    EXPECT_EQ(x.storage().use_count(), 1) << "a fused program still holds input x";
    EXPECT_EQ(z.storage().use_count(), 1) << "a fused program still holds input z";
  }
}

}  // namespace
}  // namespace symmflow
