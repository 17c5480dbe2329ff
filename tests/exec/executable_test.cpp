// The Executable against the eager interpreter, element for element, on 1, 2 and 4 ranks; input
// binding with and without copies; repeated runs; output views; bad inputs.
#include <cstring>
#include <functional>
#include <set>

#include <gtest/gtest.h>

#include "support/errors.hpp"
#include "support/graphs.hpp"
#include "support/tensors.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/interpret.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow {
namespace {

using exec::Executable;
using exec::OutputMode;
using testing::make_input;

class ExecTest : public ::testing::TestWithParam<int> {};

std::vector<Tensor> mlp_inputs(int layers, int rank, int seed) {
  std::vector<Tensor> in{make_input({16, 64}, DType::f32, rank, seed)};
  for (int l = 0; l < layers; ++l)
    in.push_back(make_input({64, 64}, DType::f32, rank, seed + 1 + l));
  return in;
}

TEST_P(ExecTest, TpMlpMatchesEagerWithTwoReusedBuffers) {
  const int w = GetParam(), layers = 4;
  auto plan = testing::plan_text(testing::tp_mlp_text(layers, true), w);
  std::shared_ptr<const ir::Graph> source = testing::parse(testing::tp_mlp_text(layers, false), w);
  // Exactly two intermediate buffers, one symm and one regular, reused by every layer.
  std::set<std::pair<int, size_t>> places;
  for (const auto& b : plan->buffers) {
    if (b.pool >= 0 && b.intermediate) places.insert({b.pool, b.offset});
  }
  ASSERT_EQ(places.size(), 2u);
  EXPECT_EQ(plan->pools[size_t(places.begin()->first)].name, "regular");
  EXPECT_EQ(plan->pools[size_t(places.rbegin()->first)].name, "symm[tp]");
  run_threads(w, [&](Runtime& rt) {
    Executable exe(plan);
    for (int seed = 0; seed < 3; ++seed) {
      std::vector<Tensor> in = mlp_inputs(layers, rt.rank(), seed);
      std::vector<Tensor> got = exe.run(in);
      std::vector<Tensor> want = exec::interpret(*source, in);
      ASSERT_EQ(got.size(), 1u);
      testing::expect_same(got[0], want[0], "r3");
      EXPECT_EQ(exe.last_stats().copies, 0u);
      EXPECT_EQ(exe.last_stats().output_copies, 1u);
    }
  });
}

const char* kStagedSource = R"sf(group tp
graph g(x: f32[8, 4], y: f32[8, 4]) {
  r = symm_mem::one_shot_all_reduce(x, "sum", "tp")
  b = aten::mul.Tensor(r, y)
  return b
}
)sf";
const char* kStagedPlanned = R"sf(group tp
graph g(x: f32[8, 4], y: f32[8, 4]) {
  x_s = copy(x) @ symm[tp] {copy = "input", reason = "graph input 'x' feeds symm arg 'input' of symm_mem::one_shot_all_reduce (group tp)"}
  r = symm_mem::one_shot_all_reduce(x_s, "sum", "tp") @ regular
  b = aten::mul.Tensor(r, y) @ regular
  return b
}
)sf";

TEST_P(ExecTest, ZeroCopyInputBindingAndCopyBinding) {
  const int w = GetParam();
  auto plan = testing::plan_text(kStagedPlanned, w);
  std::shared_ptr<const ir::Graph> source = testing::parse(kStagedSource, w);
  run_threads(w, [&](Runtime& rt) {
    Executable exe(plan);
    Tensor x = make_input({8, 4}, DType::f32, rt.rank(), 1),
           y = make_input({8, 4}, DType::f32, rt.rank(), 2);
    std::vector<Tensor> want = exec::interpret(*source, {x, y});
    // Copy binding: the caller's own tensor is copied into the staging buffer.
    std::vector<Tensor> got = exe.run({x, y});
    testing::expect_same(got[0], want[0], "copy binding");
    EXPECT_EQ(exe.last_stats().copies, 1u);
    EXPECT_EQ(exe.last_stats().bytes_copied, 8u * 4 * 4);
    EXPECT_EQ(exe.last_stats().input_copies_skipped, 0u);
    // Zero-copy binding: the caller writes its input into the staging buffer itself.
    Tensor handle = exe.input_handle(0);
    EXPECT_TRUE(handle.is_symmetric());
    EXPECT_EQ(handle.raw_data(), exe.buffer("x_s").raw_data());
    testing::expect_same(handle, x, "the staging buffer holds x after the copy");
    Tensor x2 = make_input({8, 4}, DType::f32, rt.rank(), 3);
    std::vector<Tensor> want2 = exec::interpret(*source, {x2, y});
    std::memcpy(handle.raw_data(), x2.raw_data(), x2.nbytes());
    got = exe.run({handle, y});
    testing::expect_same(got[0], want2[0], "zero-copy binding");
    EXPECT_EQ(exe.last_stats().copies, 0u);
    EXPECT_EQ(exe.last_stats().bytes_copied, 0u);
    EXPECT_EQ(exe.last_stats().input_copies_skipped, 1u);
    // y has no staging buffer: its handle is a plain tensor owned by the Executable.
    Tensor yh = exe.input_handle(1);
    EXPECT_FALSE(yh.is_symmetric());
    EXPECT_EQ(yh.raw_data(), exe.input_handle(1).raw_data());
  });
}

TEST_P(ExecTest, RepeatedRunsReusePoolsAndOutputViews) {
  const int w = GetParam(), layers = 2;
  auto plan = testing::plan_text(testing::tp_mlp_text(layers, true), w);
  std::shared_ptr<const ir::Graph> source = testing::parse(testing::tp_mlp_text(layers, false), w);
  run_threads(w, [&](Runtime& rt) {
    Executable exe(plan);
    const size_t allocations = exe.allocations();
    EXPECT_EQ(allocations, 2u);  // one host pool, one heap
    uint64_t seq_before = rt.group("tp")->next_allocation_seq();
    std::vector<Tensor> first_owned = exe.run(mlp_inputs(layers, rt.rank(), 0));
    std::vector<Tensor> first_view =
        exe.run(mlp_inputs(layers, rt.rank(), 0), {OutputMode::view, {}});
    EXPECT_EQ(first_view[0].raw_data(), exe.buffer("r1").raw_data());  // a view into the pool
    EXPECT_NE(first_owned[0].raw_data(), first_view[0].raw_data());
    testing::expect_same(first_owned[0], first_view[0], "owned vs view");
    Tensor before = first_owned[0];
    for (int seed = 1; seed < 5; ++seed) {
      std::vector<Tensor> in = mlp_inputs(layers, rt.rank(), seed);
      std::vector<Tensor> got = exe.run(in, {OutputMode::view, {}});
      EXPECT_EQ(got[0].raw_data(), first_view[0].raw_data());
      testing::expect_same(got[0], exec::interpret(*source, in)[0], "run " + std::to_string(seed));
      testing::expect_same(first_view[0], got[0], "an old view sees the latest run");
    }
    testing::expect_same(before, exec::interpret(*source, mlp_inputs(layers, rt.rank(), 0))[0],
                         "owned outputs stay");
    EXPECT_EQ(exe.allocations(), allocations);
    // No rendezvous happened during the runs: the group's allocation sequence only moved by the
    // interpreter's eager symmetric copies (one per all-reduce per interpret call: 5 calls x 2).
    EXPECT_EQ(rt.group("tp")->next_allocation_seq(), seq_before + 1 + 5 * 2);
  });
}

// Mutation of a graph input and of an intermediate, functional copies, views, a fused region and a
// collective on a view's consumer.
const char* kMutSource = R"sf(group tp
graph m(x: f32[4, 8], y: f32[4, 8]) {
  a = aten::sin(x)
  aten::add_.Tensor(x, a)
  v = aten::view(x, [8, 4])
  c = aten::relu(v)
  r = symm_mem::one_shot_all_reduce(c, "sum", "tp")
  aten::mul_.Tensor(a, y)
  f = fused(a, y) {
    t = aten::cos(a)
    u = aten::mul.Tensor(t, y)
    return u
  }
  return r, f, a
}
)sf";
// As functionalize + realize_symm_mem would leave it (the input update kept functional).
const char* kMutFunctional = R"sf(group tp
graph m(x: f32[4, 8], y: f32[4, 8]) {
  a = aten::sin(x) @ regular
  x_1 = functional<aten::add_.Tensor>(x, a) @ regular {reason = "x is read after the update"}
  v = aten::view(x_1, [8, 4]) @ regular
  c = aten::relu(v) @ symm[tp]
  r = symm_mem::one_shot_all_reduce(c, "sum", "tp") @ regular
  aten::mul_.Tensor(a, y)
  f = fused(a, y) @ regular {
    t = aten::cos(a)
    u = aten::mul.Tensor(t, y)
    return u
  }
  writeback x = x_1
  return r, f, a
}
)sf";
// As reinplace would leave it: the input is updated in place.
const char* kMutInplace = R"sf(group tp
graph m(x: f32[4, 8], y: f32[4, 8]) {
  a = aten::sin(x) @ regular
  aten::add_.Tensor(x, a)
  v = aten::view(x, [8, 4])
  c = aten::relu(v) @ symm[tp]
  r = symm_mem::one_shot_all_reduce(c, "sum", "tp") @ regular {out_variant = "symm_mem::one_shot_all_reduce_out"}
  aten::mul_.Tensor(a, y)
  f = fused(a, y) @ regular {
    t = aten::cos(a)
    u = aten::mul.Tensor(t, y)
    return u
  }
  return r, f, a
}
)sf";

TEST_P(ExecTest, MutationViewsFusedMatchEager) {
  const int w = GetParam();
  std::shared_ptr<const ir::Graph> source = testing::parse(kMutSource, w);
  for (const char* planned : {kMutFunctional, kMutInplace}) {
    auto plan = testing::plan_text(planned, w);
    const bool functional = planned == kMutFunctional;
    run_threads(w, [&](Runtime& rt) {
      Executable exe(plan);
      for (OutputMode mode : {OutputMode::owned, OutputMode::view}) {
        Tensor x = make_input({4, 8}, DType::f32, rt.rank(), 4),
               y = make_input({4, 8}, DType::f32, rt.rank(), 5);
        Tensor x_eager = testing::make_input({4, 8}, DType::f32, rt.rank(), 4);
        std::vector<Tensor> want = exec::interpret(*source, {x_eager, y});
        std::vector<Tensor> got = exe.run({x, y}, {mode, {}});
        ASSERT_EQ(got.size(), 3u);
        for (size_t i = 0; i < 3; ++i)
          testing::expect_same(got[i], want[i], "output " + std::to_string(i));
        testing::expect_same(x, x_eager, "the mutated input");
        // functional: a copy of x for the update, its writeback; in place: none.
        EXPECT_EQ(exe.last_stats().copies, functional ? 2u : 0u);
      }
    });
  }
}

TEST_P(ExecTest, OutputViewFedBackAsInput) {
  // x <- tp_mlp(x) repeatedly with output views: the input lives in the pool the steps overwrite,
  // so the Executable reads it from a snapshot.
  const int w = GetParam(), layers = 3;
  auto plan = testing::plan_text(testing::tp_mlp_text(layers, true), w);
  std::shared_ptr<const ir::Graph> source = testing::parse(testing::tp_mlp_text(layers, false), w);
  run_threads(w, [&](Runtime& rt) {
    Executable exe(plan);
    std::vector<Tensor> in = mlp_inputs(layers, rt.rank(), 0);
    std::vector<Tensor> eager = in;
    eager[0] = testing::make_input({16, 64}, DType::f32, rt.rank(), 0);
    for (int it = 0; it < 3; ++it) {
      std::vector<Tensor> got = exe.run(in, {OutputMode::view, {}});
      EXPECT_EQ(exe.last_stats().copies, it == 0 ? 0u : 1u);
      eager[0] = exec::interpret(*source, eager)[0];
      testing::expect_same(got[0], eager[0], "iteration " + std::to_string(it));
      in[0] = got[0];
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ExecTest, ::testing::Values(1, 2, 4),
                         [](const auto& p) { return "w" + std::to_string(p.param); });

using testing::error_of;

TEST(Exec, BadInputs) {
  auto plan = testing::plan_text(testing::tp_mlp_text(1, true), 1);
  run_threads(1, [&](Runtime&) {
    Executable exe(plan);
    Tensor x = Tensor::empty({16, 64}, DType::f32), w0 = Tensor::empty({64, 64}, DType::f32);
    EXPECT_EQ(error_of([&] { exe.run({x}); }),
              "run: graph 'tp_mlp' takes 2 inputs (x, w0) but got 1");
    EXPECT_EQ(error_of([&] {
                exe.run({x, w0, x});
              }),
              "run: graph 'tp_mlp' takes 2 inputs (x, w0) but got 3");
    EXPECT_EQ(error_of([&] {
                exe.run({Tensor::empty({16, 32}, DType::f32), w0});
              }),
              "run: input 'x' (#0) expects f32[16, 64] but got f32[16, 32]");
    EXPECT_EQ(error_of([&] {
                exe.run({x, Tensor::empty({64, 64}, DType::f64)});
              }),
              "run: input 'w0' (#1) expects f32[64, 64] but got f64[64, 64]");
    EXPECT_EQ(error_of([&] {
                exe.run({Tensor(), w0});
              }),
              "run: input 'x' (#0) is an undefined tensor; expected f32[16, 64]");
    EXPECT_EQ(error_of([&] { exe.input_handle(2); }),
              "input_handle: graph 'tp_mlp' has 2 inputs, no input #2");
    EXPECT_EQ(error_of([&] { exec::interpret(*plan->graph, {x}); }),
              "interpret: graph 'tp_mlp' takes 2 inputs (x, w0) but got 1");
    // The Executable still runs after refusing.
    EXPECT_EQ(exe.run({x, w0}).size(), 1u);
  });
  EXPECT_EQ(
      error_of([&] { run_threads(2, [&](Runtime&) { Executable exe(plan); }); }),
      "rank 0: Executable: graph 'tp_mlp' was built for a world of 1 ranks but runs on 2 (parse or "
      "build it with world_size 2)");
}

TEST(Exec, GpuWithoutTheCudaBackendIsRefused) {
  auto plan = testing::plan_text(R"sf(graph g(x: f32[3, 5]) {
  a = aten::exp(x)
  return a
})sf");
  EXPECT_EQ(error_of([&] { Executable exe(plan, exec::ExecOptions{Device::cuda(0)}); }),
            "Executable: the cuda backend is not loaded; link symmflow_cuda and call "
            "symmflow::cuda::bind_device() on each rank thread before making the Executable");
  EXPECT_EQ(error_of([&] { Executable exe(plan, exec::ExecOptions{Device::meta()}); }),
            "Executable: cannot run on meta");
}

// A local graph with two outputs, one a view (exp, then t and neg).
constexpr const char* kLocalGraph = R"sf(graph g(x: f32[3, 5]) {
  a = aten::exp(x)
  b = aten::t(a)
  c = aten::neg(b)
  return c, b
})sf";

TEST(Exec, LocalGraphRunsWithoutARank) {
  auto plan = testing::plan_text(kLocalGraph);
  Executable exe(plan);
  Tensor x = make_input({3, 5}, DType::f32, 0, 9);
  std::vector<Tensor> got = exe.run({x});
  std::vector<Tensor> want = exec::interpret(*plan->graph, {x});
  testing::expect_same(got[0], want[0], "c");
  testing::expect_same(got[1], want[1], "b (a view)");
}

// Note [outputs bound in place]: into destinations, an output with a buffer of its own is written
// in place, every run, whichever destination comes; an input passed through, a view, a value
// that a view reads, an output listed twice, and a destination that overlaps an input are copied. Every element against the
// interpreter, across runs with alternating destinations (the pool's memory is reused between
// the intermediates and the outputs' planned buffers).
constexpr const char* kManyOutputs = R"sf(graph g(x: f32[4, 6]) {
  a = aten::exp(x)
  b = aten::neg(a)
  c = aten::add.Tensor(b, x)
  d = aten::mul.Tensor(c, c)
  v = aten::t(d)
  e = aten::sin(d)
  return e, x, v, c, c, d
})sf";

TEST(Exec, OutputsBoundInPlace) {
  auto plan = testing::plan_text(kManyOutputs);
  Executable exe(plan);
  for (int run = 0; run < 4; ++run) {
    Tensor x = make_input({4, 6}, DType::f32, run, 9);
    std::vector<Tensor> want = exec::interpret(*plan->graph, {x});
    std::vector<Tensor> into;
    for (const Tensor& w : want) into.push_back(Tensor::empty(w.shape(), DType::f32));
    exec::RunOptions options;
    options.into = into;
    if (run == 3) options.into[0] = x;  // e's destination is the input: copied after the steps
    std::vector<Tensor> got = exe.run({x}, options);
    for (size_t o = 0; o < want.size(); ++o) {
      EXPECT_EQ(got[o].raw_data(), options.into[o].raw_data()) << o;
      if (run == 3 && o == 1) continue;  // x, copied out after e was copied into it
      testing::expect_same(got[o], want[o], fmt::format("run {} output {}", run, o));
    }
    // e: bound (at run 3 copied); x (an input), v (a view), c (listed twice), d (v views it):
    // copied.
    EXPECT_EQ(exe.last_stats().outputs_bound, run == 3 ? 0u : 1u) << run;
    EXPECT_EQ(exe.last_stats().output_copies, run == 3 ? 6u : 5u) << run;
  }
  // The tunable bind_outputs = 0: every output copied, the same values.
  Tunables saved = tunables(), off = saved;
  off.bind_outputs = false;
  set_tunables(off);
  Tensor x = make_input({4, 6}, DType::f32, 7, 9);
  std::vector<Tensor> want = exec::interpret(*plan->graph, {x});
  exec::RunOptions options;
  for (const Tensor& w : want) options.into.push_back(Tensor::empty(w.shape(), DType::f32));
  exe.run({x}, options);
  set_tunables(saved);
  EXPECT_EQ(exe.last_stats().outputs_bound, 0u);
  EXPECT_EQ(exe.last_stats().output_copies, 6u);
  for (size_t o = 0; o < want.size(); ++o)
    testing::expect_same(options.into[o], want[o], fmt::format("unbound output {}", o));
}

// Note [outputs that are views]: AOT's weight gradient permute(permute(mm)) and a norm's
// reshape(sum) are bound through their bases (written in place, no copy); a strided view, and a
// base that two outputs reach (the value and a view of it), are copied; every value is right, run
// after run (the bases' slots return to the pool between runs).
const char* kViewOutputs = R"sf(graph views(x: f32[4, 6], w: f32[6, 6], y: f32[3, 6]) {
  m = aten::mm(x, w)
  p1 = aten::permute(m, [1, 0])
  p2 = aten::permute(p1, [1, 0])
  s = aten::sum.dim_IntList(y, [0], True)
  r = aten::reshape(s, [6])
  n = aten::mm(x, w)
  t = aten::t(n)
  q = aten::exp(x)
  qv = aten::reshape(q, [24])
  return p2, r, t, q, qv
})sf";

TEST(Exec, OutputsThatAreContiguousViewsBoundThroughTheirBases) {
  auto plan = testing::plan_text(kViewOutputs);
  Executable exe(plan);
  for (int run = 0; run < 3; ++run) {
    std::vector<Tensor> in = {make_input({4, 6}, DType::f32, run, 9),
                              make_input({6, 6}, DType::f32, run + 1, 9),
                              make_input({3, 6}, DType::f32, run + 2, 9)};
    std::vector<Tensor> want = exec::interpret(*plan->graph, in);
    exec::RunOptions options;
    for (const Tensor& w : want) options.into.push_back(Tensor::empty(w.shape(), DType::f32));
    std::vector<Tensor> got = exe.run(in, options);
    for (size_t o = 0; o < want.size(); ++o) {
      EXPECT_EQ(got[o].raw_data(), options.into[o].raw_data()) << o;
      testing::expect_same(got[o], want[o], fmt::format("run {} output {}", run, o));
    }
    EXPECT_EQ(exe.last_stats().outputs_bound, 2u) << run;  // p2 through m, r through s
    EXPECT_EQ(exe.last_stats().output_copies, 3u) << run;  // t strided; q and qv share q
  }
}

// RunOptions::into: outputs land in the caller's tensors (a strided one too) and run() returns
// them, each written in place or counted as an output copy; destinations of another shape or
// number are refused.
TEST(Exec, OutputsIntoCallerTensors) {
  auto plan = testing::plan_text(kLocalGraph);
  Executable exe(plan);
  Tensor x = make_input({3, 5}, DType::f32, 0, 9);
  std::vector<Tensor> want = exec::interpret(*plan->graph, {x});
  Tensor c = Tensor::empty({5, 3}, DType::f32);
  Tensor b_storage = Tensor::empty({3, 5}, DType::f32);
  Tensor b = b_storage.as_strided({5, 3}, {1, 5}, 0);  // a strided destination
  exec::RunOptions options;
  options.into = {c, b};
  std::vector<Tensor> got = exe.run({x}, options);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].raw_data(), c.raw_data());
  EXPECT_EQ(got[1].raw_data(), b.raw_data());
  testing::expect_same(c, want[0], "c into the caller's tensor");
  testing::expect_same(b, want[1], "b into a strided destination");
  // c is written in place (Note [outputs bound in place]); b, a view and strided, is copied.
  EXPECT_EQ(exe.last_stats().outputs_bound, 1u);
  EXPECT_EQ(exe.last_stats().output_copies, 1u);
  options.into = {Tensor::empty({3, 5}, DType::f32), b};
  EXPECT_EQ(testing::error_of([&] { exe.run({x}, options); }),
            "run: output 0 of program 'g' is f32[5, 3], its destination is f32[3, 5]");
  options.into = {c};
  EXPECT_EQ(testing::error_of([&] { exe.run({x}, options); }),
            "run: 1 destinations for the 2 outputs of program 'g'");
  exec::RunOptions on_stream;
  on_stream.stream = nullptr;  // the legacy default stream: meaningless for a host plan
  EXPECT_EQ(testing::error_of([&] { exe.run({x}, on_stream); }),
            "run: program 'g' runs on the cpu; a stream orders GPU runs only");
}

}  // namespace
}  // namespace symmflow

namespace symmflow {
namespace {

// Found by tests/e2e: x is staged for an in-place all-reduce and also read by `neg`, which the
// schedule runs after the all-reduce. Bound zero-copy, the caller's x would be the staging buffer
// the all-reduce overwrites, so `neg` would read the reduced values: the handle must not be it.
TEST(Exec, ZeroCopyBindingRefusedWhenTheInputHasOtherReaders) {
  const char* kSource = R"sf(group tp
graph g(x: f32[8]) {
  a = aten::neg(x)
  symm_mem::two_shot_all_reduce_(x, "sum", "tp")
  return a, x
}
)sf";
  std::shared_ptr<const passes::Plan> plan = passes::compile(testing::parse(kSource, 2));
  std::shared_ptr<const ir::Graph> source = testing::parse(kSource, 2);
  run_threads(2, [&](Runtime& rt) {
    Executable exe(plan);
    Tensor x = make_input({8}, DType::f32, rt.rank(), 1);
    Tensor x_eager = make_input({8}, DType::f32, rt.rank(), 1);
    std::vector<Tensor> want = exec::interpret(*source, {x_eager});
    Tensor handle = exe.input_handle(0);
    std::memcpy(handle.raw_data(), x.raw_data(), x.nbytes());
    std::vector<Tensor> got = exe.run({handle});
    testing::expect_same(got[0], want[0], "neg(x)");
    testing::expect_same(got[1], want[1], "x after the all-reduce");
    testing::expect_same(handle, x_eager, "the caller's x");
  });
}

}  // namespace
}  // namespace symmflow
