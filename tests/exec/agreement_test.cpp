// Rank agreement (Note [rank agreement] in src/exec/agreement.cpp) on the threads transport:
// ranks that bind another dtype of the same byte count, another shape of the same numel or
// another stride order, and ranks that compiled different plans, raise on every rank with the
// exact text; an unchanged binding exchanges nothing; worlds of 1 to 8 ranks; the tunable turns it
// off; the cost is printed (RankAgreementCost).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/errors.hpp"
#include "support/tensors.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/interpret.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow {
namespace {

using exec::Executable;
using testing::make_input;

// x is declared on line 3, y on line 4.
const char* kProgram = R"sf(group tp
graph agree(
  x: f32[8, 4],
  y: f32[8, 4]) {
  r = symm_mem::one_shot_all_reduce(x, "sum", "tp")
  b = aten::mul.Tensor(r, y)
  return b
}
)sf";

// The same inputs, another body.
const char* kOtherBody = R"sf(group tp
graph agree(
  x: f32[8, 4],
  y: f32[8, 4]) {
  r = symm_mem::one_shot_all_reduce(x, "sum", "tp")
  b = aten::add.Tensor(r, y)
  return b
}
)sf";

// x declared with another shape of the same size.
const char* kOtherShape = R"sf(group tp
graph agree(
  x: f32[4, 8],
  y: f32[8, 4]) {
  r = symm_mem::one_shot_all_reduce(x, "sum", "tp")
  s = aten::reshape(r, [8, 4])
  b = aten::mul.Tensor(s, y)
  return b
}
)sf";

std::unique_ptr<ir::Graph> parse(const char* text, int world) {
  ir::ParseOptions o;
  o.filename = "agree.sf";
  o.world_size = world;
  return ir::parse_graph(text, o);
}

std::shared_ptr<const passes::Plan> compile(const char* text, int world) {
  return passes::compile(parse(text, world));
}

// Runs fn on `world` ranks and returns each rank's error text ("" when it finished).
std::vector<std::string> errors_of(int world, const std::function<void(Runtime&)>& fn,
                                   double timeout_s = -1) {
  ThreadsOptions o;
  o.timeout_s = timeout_s;
  std::vector<std::exception_ptr> errs = run_threads_collect(world, fn, o);
  std::vector<std::string> out;
  for (const std::exception_ptr& e : errs) {
    out.push_back(e ? testing::error_of([&] { std::rethrow_exception(e); }) : "");
  }
  return out;
}

// A [8, 4] view with column-major strides.
Tensor transposed(int rank, int seed) {
  return make_input({4, 8}, DType::f32, rank, seed).as_strided({8, 4}, {1, 8}, 0);
}

class RankAgreementTest : public ::testing::TestWithParam<int> {};

TEST_P(RankAgreementTest, AgreesOnceAndThenOnlyWhenTheBindingChanges) {
  const int w = GetParam();
  auto plan = compile(kProgram, w);
  std::shared_ptr<const ir::Graph> source = parse(kProgram, w);
  const size_t per_exchange = w > 1 ? 1 : 0;  // a world of one rank never communicates
  run_threads(w, [&](Runtime& rt) {
    Executable exe(plan);
    EXPECT_EQ(exe.agreement_exchanges(), per_exchange);  // the plan, at construction
    for (int seed = 0; seed < 3; ++seed) {
      std::vector<Tensor> in{make_input({8, 4}, DType::f32, rt.rank(), seed),
                             make_input({8, 4}, DType::f32, rt.rank(), seed + 7)};
      std::vector<Tensor> got = exe.run(in);
      testing::expect_same(got[0], exec::interpret(*source, in)[0], "b");
      EXPECT_EQ(exe.agreement_exchanges(), 2 * per_exchange) << "seed " << seed;
    }
    // Every rank switches to a strided x: one more exchange, then none.
    for (int seed = 0; seed < 2; ++seed) {
      std::vector<Tensor> in{transposed(rt.rank(), seed),
                             make_input({8, 4}, DType::f32, rt.rank(), seed + 7)};
      std::vector<Tensor> got = exe.run(in);
      testing::expect_same(got[0], exec::interpret(*source, in)[0], "b (strided x)");
      EXPECT_EQ(exe.agreement_exchanges(), 3 * per_exchange);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, RankAgreementTest, ::testing::Values(1, 2, 3, 4, 8));

// Rank `odd` binds `odd_x`, every other rank a contiguous f32[8, 4]; every rank must raise `want`.
void expect_binding_refused(int w, int odd, const std::function<Tensor(int)>& odd_x,
                            const std::string& want) {
  auto plan = compile(kProgram, w);
  std::vector<std::string> errors = errors_of(w, [&](Runtime& rt) {
    Executable exe(plan);
    Tensor x = rt.rank() == odd ? odd_x(rt.rank()) : make_input({8, 4}, DType::f32, rt.rank(), 1);
    exe.run({x, make_input({8, 4}, DType::f32, rt.rank(), 2)});
  });
  for (int r = 0; r < w; ++r) EXPECT_EQ(errors[size_t(r)], want) << "rank " << r;
}

TEST(RankAgreement, AnotherDtypeOfTheSameByteCountIsRefusedOnEveryRank) {
  expect_binding_refused(
      2, 1, [](int r) { return make_input({8, 8}, DType::bf16, r, 1); },
      "run: the ranks of program 'agree' bind different inputs (rank agreement):\n"
      "  input 'x' (agree.sf:3): rank 0 binds f32[8, 4] strides [4, 1], rank 1 binds bf16[8, 8] "
      "strides [8, 1]");
}

TEST(RankAgreement, AnotherShapeOfTheSameSizeIsRefusedOnEveryRank) {
  expect_binding_refused(
      4, 2, [](int r) { return make_input({4, 8}, DType::f32, r, 1); },
      "run: the ranks of program 'agree' bind different inputs (rank agreement):\n"
      "  input 'x' (agree.sf:3): ranks 0, 1, 3 bind f32[8, 4] strides [4, 1], rank 2 binds "
      "f32[4, 8] strides [8, 1]");
}

TEST(RankAgreement, AnotherStrideOrderIsRefusedOnEveryRank) {
  expect_binding_refused(
      3, 0, [](int r) { return transposed(r, 1); },
      "run: the ranks of program 'agree' bind different inputs (rank agreement):\n"
      "  input 'x' (agree.sf:3): rank 0 binds f32[8, 4] strides [1, 8], ranks 1, 2 bind f32[8, 4] "
      "strides [4, 1]");
}

TEST(RankAgreement, EveryDifferingInputIsNamed) {
  auto plan = compile(kProgram, 2);
  std::vector<std::string> errors = errors_of(2, [&](Runtime& rt) {
    Executable exe(plan);
    DType d = rt.rank() == 0 ? DType::f32 : DType::i32;
    Tensor y = rt.rank() == 0 ? transposed(0, 2) : make_input({8, 4}, DType::f32, 1, 2);
    exe.run({make_input({8, 4}, d, rt.rank(), 1), y});
  });
  const std::string want =
      "run: the ranks of program 'agree' bind different inputs (rank agreement):\n"
      "  input 'x' (agree.sf:3): rank 0 binds f32[8, 4] strides [4, 1], rank 1 binds i32[8, 4] "
      "strides [4, 1]\n"
      "  input 'y' (agree.sf:4): rank 0 binds f32[8, 4] strides [1, 8], rank 1 binds f32[8, 4] "
      "strides [4, 1]";
  EXPECT_EQ(errors[0], want);
  EXPECT_EQ(errors[1], want);
}

// A graph built through the API has no source line: the input is named alone.
TEST(RankAgreement, AnInputOfABuiltGraphIsNamedWithoutALine) {
  auto g = std::make_unique<ir::Graph>("built", 2);
  ir::Value* x = g->add_input("x", {DType::f32, {8, 4}});
  ir::Node* r = g->add_op("symm_mem::one_shot_all_reduce",
                          {ir::Arg::of(x), ir::Arg::of_literal(std::string("sum")),
                           ir::Arg::of_literal(std::string("world"))});
  g->set_outputs({r->output()});
  auto plan = passes::compile(std::move(g));
  std::vector<std::string> errors = errors_of(2, [&](Runtime& rt) {
    Executable exe(plan);
    exe.run({rt.rank() == 0 ? transposed(0, 1) : make_input({8, 4}, DType::f32, 1, 1)});
  });
  const std::string want =
      "run: the ranks of program 'built' bind different inputs (rank agreement):\n"
      "  input 'x': rank 0 binds f32[8, 4] strides [1, 8], rank 1 binds f32[8, 4] strides [4, 1]";
  EXPECT_EQ(errors, std::vector<std::string>(2, want));
}

TEST(RankAgreement, DifferentProgramsWithTheSameInputsAreRefusedAtConstruction) {
  auto a = compile(kProgram, 2), b = compile(kOtherBody, 2);
  std::vector<std::string> errors = errors_of(2, [&](Runtime& rt) {
    Executable exe(rt.rank() == 0 ? a : b);
    ADD_FAILURE() << "rank " << rt.rank() << " built an Executable";
  });
  for (const std::string& e : errors) {
    EXPECT_EQ(e.substr(0, e.find('\n')),
              "Executable: the ranks compiled different plans (rank agreement); they differ in: "
              "steps");
    EXPECT_NE(e.find("\n  rank 0: program 'agree' for 2 ranks, groups world tp, 3 steps, pools "
                     "symm[tp] 128 B, plan "),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("\n  rank 1: program 'agree' for 2 ranks"), std::string::npos) << e;
  }
  EXPECT_EQ(errors[0], errors[1]);
}

// Rank r's program reads another value and scales by another literal between the same
// collectives on the same symmetric buffers (DTensor's sequence-parallel backward takes this
// rank's piece of a split): the same program to its peers, so it runs.
std::string per_rank_program(int rank) {
  return fmt::format(R"sf(group tp
graph agree(
  x: f32[8, 4],
  y: f32[8, 4]) {{
  r = symm_mem::one_shot_all_reduce(x, "sum", "tp")
  b = aten::mul.Tensor(r, {})
  c = aten::mul.Scalar(b, {})
  s = aten::slice.Tensor(c, 0, {}, {})
  return s
}}
)sf",
                     rank == 0 ? "x" : "y", rank == 0 ? "2.0" : "3.5", rank * 4, rank * 4 + 4);
}

TEST(RankAgreement, PerRankLocalStepsBetweenTheSameCollectivesRun) {
  std::vector<std::shared_ptr<const passes::Plan>> plans;
  for (int r = 0; r < 2; ++r) plans.push_back(compile(per_rank_program(r).c_str(), 2));
  run_threads(2, [&](Runtime& rt) {
    const int me = rt.rank();
    Executable exe(plans[size_t(me)]);
    auto x = [](int r) { return make_input({8, 4}, DType::f32, r, 1); };
    Tensor y = make_input({8, 4}, DType::f32, me, 2);
    std::vector<Tensor> got = exe.run({x(me), y});
    Tensor sum = aten::add(x(0), x(1));
    Tensor want = aten::mul(aten::mul(sum, me == 0 ? x(me) : y), me == 0 ? 2.0 : 3.5);
    testing::expect_same(got[0], aten::slice(want, 0, me * 4, me * 4 + 4), "s");
  });
}

TEST(RankAgreement, DifferentlyDeclaredInputsAreNamedWithTheirLine) {
  auto a = compile(kProgram, 4), b = compile(kOtherShape, 4);
  std::vector<std::string> errors = errors_of(4, [&](Runtime& rt) {
    Executable exe(rt.rank() == 3 ? b : a);
  });
  for (const std::string& e : errors) {
    EXPECT_EQ(e.substr(0, e.find("\n  rank")),
              "Executable: the ranks compiled different plans (rank agreement); they differ in: "
              "inputs, step count, steps\n"
              "  input 'x' (agree.sf:3): ranks 0, 1, 2 expect f32[8, 4], rank 3 expects f32[4, 8]");
    EXPECT_NE(e.find("\n  ranks 0, 1, 2: program 'agree'"), std::string::npos) << e;
    EXPECT_NE(e.find("\n  rank 3: program 'agree' for 4 ranks, groups world tp, 4 steps"),
              std::string::npos)
        << e;
  }
}

TEST(RankAgreement, AnotherWorldSizeIsRefusedOnEveryRank) {
  auto four = compile(kProgram, 4), two = compile(kProgram, 2);
  std::vector<std::string> errors = errors_of(4, [&](Runtime& rt) {
    Executable exe(rt.rank() == 1 ? two : four);
  });
  for (const std::string& e : errors) {
    EXPECT_EQ(e.substr(0, e.find('\n')),
              "Executable: the ranks compiled different plans (rank agreement); they differ in: "
              "world size, steps");
    EXPECT_NE(e.find("\n  rank 1: program 'agree' for 2 ranks"), std::string::npos) << e;
    EXPECT_NE(e.find("\n  ranks 0, 2, 3: program 'agree' for 4 ranks"), std::string::npos) << e;
  }
}

// A rank whose binding changes alone waits for peers that never join: Timeout naming the change,
// never wrong results.
TEST(RankAgreement, ARankThatChangesItsBindingAloneTimesOut) {
  auto plan = compile(kProgram, 2);
  std::vector<std::string> errors = errors_of(
      2,
      [&](Runtime& rt) {
        Executable exe(plan);
        Tensor y = make_input({8, 4}, DType::f32, rt.rank(), 2);
        exe.run({make_input({8, 4}, DType::f32, rt.rank(), 1), y});
        Tensor x = rt.rank() == 1 ? transposed(rt.rank(), 1)
                                  : make_input({8, 4}, DType::f32, rt.rank(), 1);
        // Rank 0 starts waiting later, so rank 1's exchange times out first.
        if (rt.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(400));
        exe.run({x, y});
      },
      1.0);
  EXPECT_NE(errors[1].find("run: rank 1's inputs differ from the last run its peers agreed on "
                           "(now f32[8, 4] strides [1, 8]; f32[8, 4] strides [4, 1]), but its "
                           "peers did not join the rank agreement"),
            std::string::npos)
      << errors[1];
  EXPECT_NE(errors[0].find("rank 1 failed (run: rank 1's inputs differ"), std::string::npos)
      << errors[0];
}

// After agreed runs, a rank binding what the plan refuses raises its own error at once.
TEST(RankAgreement, ARankThatBindsWhatThePlanRefusesAfterAgreedRunsRaisesAtOnce) {
  auto plan = compile(kProgram, 2);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> errors = errors_of(
      2,
      [&](Runtime& rt) {
        Executable exe(plan);
        Tensor y = make_input({8, 4}, DType::f32, rt.rank(), 2);
        exe.run({make_input({8, 4}, DType::f32, rt.rank(), 1), y});
        DType d = rt.rank() == 1 ? DType::bf16 : DType::f32;
        exe.run({make_input({8, int64_t(d == DType::f32 ? 4 : 8)}, d, rt.rank(), 1), y});
      },
      20.0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(errors[1], "run: input 'x' (#0) expects f32[8, 4] but got bf16[8, 8]");
  EXPECT_NE(errors[0].find("rank 1 failed (run: input 'x' (#0) expects"), std::string::npos)
      << errors[0];
}

TEST(RankAgreement, TheTunableTurnsItOff) {
  Tunables saved = tunables(), off = saved;
  off.rank_agreement = false;
  set_tunables(off);
  auto plan = compile(kProgram, 2);
  std::shared_ptr<const ir::Graph> source = parse(kProgram, 2);
  std::vector<std::string> errors = errors_of(2, [&](Runtime& rt) {
    Executable exe(plan);
    // Layouts differ, values agree: not checked, and right.
    Tensor x = rt.rank() == 0 ? transposed(0, 1) : make_input({8, 4}, DType::f32, 1, 1);
    std::vector<Tensor> in{x, make_input({8, 4}, DType::f32, rt.rank(), 2)};
    testing::expect_same(exe.run(in)[0], exec::interpret(*source, in)[0], "b");
    EXPECT_EQ(exe.agreement_exchanges(), 0u);
  });
  set_tunables(saved);
  EXPECT_EQ(errors, std::vector<std::string>(2, ""));
}

// The cost of agreement per run: an exchange (the binding changed: alternating two layouts) and
// the cached path, then a whole run of a small plan with agreement on and off (medians).
double median_us(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
std::vector<double> time_each(int n, F&& f) {
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f(i);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                     .count());
  }
  return us;
}

// Times `runs` runs of a small plan on every rank (after warm-up runs); appends rank 0's times.
void time_runs(const std::shared_ptr<const passes::Plan>& plan, int w, bool agreement, int runs,
               std::vector<double>& us, size_t* exchanges) {
  Tunables saved = tunables(), t = saved;
  t.rank_agreement = agreement;
  set_tunables(t);
  run_threads(w, [&](Runtime& rt) {
    Executable exe(plan);
    std::vector<Tensor> in{make_input({8, 4}, DType::f32, rt.rank(), 1),
                           make_input({8, 4}, DType::f32, rt.rank(), 2)};
    exec::RunOptions views;
    views.output_mode = exec::OutputMode::view;
    for (int i = 0; i < 20; ++i) exe.run(in, views);  // warm
    std::vector<double> mine = time_each(runs, [&](int) { exe.run(in, views); });
    if (rt.rank() == 0) us.insert(us.end(), mine.begin(), mine.end());
    if (rt.rank() == 0) *exchanges = exe.agreement_exchanges();
  });
  set_tunables(saved);
}

TEST(RankAgreementCost, PrintsThePerRunCostAt2And8Ranks) {
  for (int w : {2, 8}) {
    auto plan = compile(kProgram, w);
    double exchange = 0, cached = 0;
    run_threads(w, [&](Runtime& rt) {
      std::vector<Tensor> a{make_input({8, 4}, DType::f32, rt.rank(), 1),
                            make_input({8, 4}, DType::f32, rt.rank(), 2)};
      std::vector<Tensor> b{transposed(rt.rank(), 1), a[1]};
      Executable exe(plan);
      // The agreement of a run whose binding changed (alternating two layouts: every call
      // exchanges), then of runs that bind what the last one did (no exchange).
      std::vector<double> exchanging =
          time_each(400, [&](int i) { exe.agree_on_inputs(i % 2 ? a : b); });
      std::vector<double> same = time_each(20000, [&](int) { exe.agree_on_inputs(a); });
      ASSERT_EQ(exe.agreement_exchanges(), 1u + 400u);
      if (rt.rank() == 0) exchange = median_us(exchanging), cached = median_us(same);
    });
    // On and off in alternating rounds, so that the machine's load weighs on both alike.
    size_t on_exchanges = 0, off_exchanges = 0;
    const int rounds = 6, per_round = 500, runs = rounds * per_round;
    std::vector<double> on_us, off_us;
    for (int round = 0; round < rounds; ++round) {
      time_runs(plan, w, true, per_round, on_us, &on_exchanges);
      time_runs(plan, w, false, per_round, off_us, &off_exchanges);
    }
    double on = median_us(on_us), off = median_us(off_us);
    EXPECT_EQ(on_exchanges, 2u);  // construction and the first run, then none
    EXPECT_EQ(off_exchanges, 0u);
    std::printf("[rank agreement] %d ranks (threads): agreement with its all-gather (first run, "
                "or binding changed) %.1f us; cached agreement %.3f us; median run of a small "
                "plan (%d runs): %.2f us with agreement, %.2f us without (%+.2f us)\n",
                w, exchange, cached, runs, on, off, on - off);
  }
}

}  // namespace
}  // namespace symmflow
