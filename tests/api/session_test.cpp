// The api's ranks and sessions (symmflow/api/session.hpp): runs on rank threads with caller-owned
// views give the interpreter's results on every element; inputs bound through input_buffer cost
// no copy; bad inputs are refused with text naming them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "symmflow/runtime/runtime.hpp"
#include "symmflow/symmflow.hpp"

namespace sf = symmflow::api;
using symmflow::DType;
using symmflow::Tensor;
using symmflow::TensorView;

namespace {

std::string example(const std::string& name) { return std::string(SYMMFLOW_EXAMPLES_DIR) + "/" + name; }

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const symmflow::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Deterministic values that differ per rank and per input.
std::vector<float> values(int64_t n, int rank, size_t input) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) v[size_t(e)] = float((e * 5 + rank * 3 + int64_t(input)) % 13) / 64.0f - 0.09f;
  return v;
}

TensorView view_of(std::vector<float>& data, const symmflow::Shape& shape) {
  TensorView v;
  v.data = data.data();
  v.dtype = DType::f32;
  v.shape = shape;
  v.strides = symmflow::contiguous_strides(shape);
  return v;
}

}  // namespace

TEST(ApiSession, CallerOwnedViewsGiveTheInterpretersResults) {
  for (const char* name : {"tp_mlp_small.sf", "halo_exchange.sf", "input_allreduce.sf",
                           "pointwise_then_allreduce.sf"}) {
    for (int ranks : {1, 2, 4}) {
      sf::Program program = sf::Program::parse_file(example(name), ranks);
      sf::CompiledProgram compiled = sf::compile(program);
      std::mutex m;
      std::vector<std::string> failures;
      sf::run_threads(ranks, [&](sf::Rank& rank) {
        sf::Session session(compiled, rank);
        std::vector<std::vector<float>> in_data, out_data;
        std::vector<TensorView> in, out;
        std::vector<Tensor> reference_inputs;
        for (size_t i = 0; i < session.inputs().size(); ++i) {
          const sf::TensorSpec& s = session.inputs()[i];
          in_data.push_back(values(symmflow::numel(s.shape), rank.rank(), i));
          reference_inputs.push_back(Tensor::from_vector(in_data.back(), s.shape));
        }
        for (size_t i = 0; i < in_data.size(); ++i) in.push_back(view_of(in_data[i], session.inputs()[i].shape));
        for (const sf::TensorSpec& s : session.outputs()) {
          out_data.emplace_back(size_t(symmflow::numel(s.shape)), -1.0f);
          out.push_back(view_of(out_data.back(), s.shape));
        }
        for (int iter = 0; iter < 2; ++iter) session.run_into(in, out);
        // Each output written in place (Note [outputs bound in place]) or copied.
        EXPECT_EQ(session.last_stats().output_copies + session.last_stats().outputs_bound,
                  out.size());
        std::vector<Tensor> want = program.interpret(reference_inputs);
        ASSERT_EQ(want.size(), out_data.size());
        for (size_t o = 0; o < want.size(); ++o) {
          std::vector<double> w = want[o].to_doubles();
          for (size_t e = 0; e < w.size(); ++e) {
            if (double(out_data[o][e]) != w[e]) {
              std::lock_guard<std::mutex> lock(m);
              failures.push_back(std::string(name) + " ranks " + std::to_string(ranks) + " rank " +
                                 std::to_string(rank.rank()) + " output " + std::to_string(o) +
                                 " element " + std::to_string(e));
              return;
            }
          }
        }
      });
      EXPECT_TRUE(failures.empty()) << failures.front();
    }
  }
}

TEST(ApiSession, InputsBoundThroughTheirBuffersCostNoCopy) {
  // input_allreduce: x feeds a symm arg, so a caller's own tensor is copied into symm[tp] once
  // per run, and the staging buffer from input_buffer is bound without a copy.
  sf::CompiledProgram compiled = sf::compile(sf::Program::parse_file(example("input_allreduce.sf"), 2));
  sf::run_threads(2, [&](sf::Rank& rank) {
    sf::Session session(compiled, rank);
    const symmflow::Shape shape = session.inputs()[0].shape;
    std::vector<float> data = values(symmflow::numel(shape), rank.rank(), 0);
    std::vector<float> result(data.size());
    session.run({Tensor::from_vector(data, shape)});
    EXPECT_EQ(session.last_stats().copies, 1u);
    EXPECT_EQ(session.last_stats().input_copies_skipped, 0u);

    Tensor buffer = session.input_buffer(0);
    EXPECT_TRUE(buffer.is_symmetric());
    std::memcpy(buffer.raw_data(), data.data(), buffer.nbytes());
    sf::RunOptions views;
    views.outputs = sf::Outputs::views;
    std::vector<Tensor> out = session.run({buffer}, views);
    EXPECT_EQ(session.last_stats().copies, 0u);
    EXPECT_EQ(session.last_stats().input_copies_skipped, 1u);
    EXPECT_EQ(session.last_stats().output_copies, 0u);
    std::vector<double> sums = out[0].to_doubles();

    // The same through caller-owned views: a view of the buffer is bound, not copied.
    std::memcpy(buffer.raw_data(), data.data(), buffer.nbytes());
    TensorView in = buffer.view();
    std::vector<float> out_data(data.size());
    const sf::RunStats& stats = session.run_into({in}, {view_of(out_data, shape)});
    EXPECT_EQ(stats.copies, 0u);
    EXPECT_EQ(stats.input_copies_skipped, 1u);
    EXPECT_EQ(stats.output_copies, 0u);  // written in place: Note [outputs bound in place]
    EXPECT_EQ(stats.outputs_bound, 1u);
    for (size_t e = 0; e < out_data.size(); ++e) ASSERT_EQ(double(out_data[e]), sums[e]) << e;
  });
}

// Note [outputs bound in place]: a destination over the same caller memory as an input (two views
// of one vector, each its own wrapper) is not written during the steps: the transposed read of
// the input sees the caller's values, and the result lands in the destination afterwards.
TEST(ApiSession, ADestinationOverAnInputIsNotWrittenDuringTheRun) {
  sf::CompiledProgram compiled = sf::compile(sf::Program::parse(
      "graph g(x: f32[4, 4]) {\n  a = aten::t(x)\n  y = aten::add.Scalar(a, 1.0)\n  return y\n}\n"));
  sf::run_threads(1, [&](sf::Rank& rank) {
    sf::Session session(compiled, rank);
    std::vector<float> data(16), other(16);
    for (size_t i = 0; i < data.size(); ++i) data[i] = float(i);
    const sf::RunStats& bound = session.run_into({view_of(data, {4, 4})}, {view_of(other, {4, 4})});
    EXPECT_EQ(bound.outputs_bound, 1u);
    const sf::RunStats& aliased = session.run_into({view_of(data, {4, 4})}, {view_of(data, {4, 4})});
    EXPECT_EQ(aliased.outputs_bound, 0u);
    EXPECT_EQ(aliased.output_copies, 1u);
    for (int r = 0; r < 4; ++r) {
      for (int c = 0; c < 4; ++c) {
        EXPECT_EQ(data[size_t(r * 4 + c)], float(c * 4 + r) + 1.0f) << r << "," << c;
        EXPECT_EQ(other[size_t(r * 4 + c)], float(c * 4 + r) + 1.0f) << r << "," << c;
      }
    }
  });
}

TEST(ApiSession, BadInputsAreRefusedNamingThem) {
  sf::CompiledProgram compiled = sf::compile(sf::Program::parse_file(example("input_allreduce.sf"), 1));
  sf::run_threads(1, [&](sf::Rank& rank) {
    sf::Session session(compiled, rank);
    Tensor good = Tensor::empty({32, 64}, DType::f32);
    EXPECT_EQ(error_of([&] { session.run({good, good}); }),
              "run: program 'input_allreduce' takes 1 inputs, got 2");
    EXPECT_EQ(error_of([&] { session.run({}); }),
              "run: program 'input_allreduce' takes 1 inputs, got 0");
    EXPECT_EQ(error_of([&] { session.run({Tensor::empty({32, 32}, DType::f32)}); }),
              "run: input 0 ('x') of program 'input_allreduce' is f32[32, 64], got f32[32, 32]");
    EXPECT_EQ(error_of([&] { session.run({Tensor::empty({32, 64}, DType::bf16)}); }),
              "run: input 0 ('x') of program 'input_allreduce' is f32[32, 64], got bf16[32, 64]");
    std::vector<float> in(32 * 64), small(8);
    EXPECT_EQ(error_of([&] { session.run_into({view_of(in, {32, 64})}, {view_of(small, {8})}); }),
              "run: output 0 ('r') of program 'input_allreduce' is f32[32, 64], got f32[8]");
    EXPECT_EQ(error_of([&] { session.run_into({view_of(in, {32, 64})}, {}); }),
              "run: program 'input_allreduce' takes 1 outputs, got 0");
    EXPECT_EQ(error_of([&] { session.input_buffer(3); }),
              "input_buffer: the program takes 1 inputs, not 4");
  });
}

TEST(ApiSession, RefusesUnknownDevicesAndForeignThreads) {
  EXPECT_EQ(error_of([] { sf::check_device("tpu"); }), "--device: 'cpu' or 'cuda' (got 'tpu')");
  if (!sf::cuda_built()) {
    EXPECT_THAT(error_of([] { sf::check_device("cuda:0"); }),
                ::testing::StartsWith(
                    "--device cuda: this symmflow was built without the cuda backend (no "));
  }
  sf::CompiledProgram compiled = sf::compile(sf::Program::parse_file(example("input_allreduce.sf"), 1));
  sf::Rank* other = nullptr;
  sf::run_threads(1, [&](sf::Rank& rank) {
    // A Rank whose runtime is not current on the calling thread (this test's main thread).
    other = &rank;
    std::string text;
    std::thread t([&] { text = error_of([&] { sf::Session s(compiled, *other); }); });
    t.join();
    EXPECT_EQ(text, "Session: rank 0's runtime is not the current one of this thread (bind on the "
                    "rank's own thread, or make it current with a RuntimeScope)");
  });
}

TEST(ApiSession, RanksExchangeBytes) {
  std::vector<std::vector<std::string>> got(3);
  sf::run_threads(3, [&](sf::Rank& rank) {
    EXPECT_EQ(rank.world_size(), 3);
    EXPECT_EQ(rank.transport(), "threads");
    rank.barrier("api test");
    got[size_t(rank.rank())] = rank.allgather(std::string(1, char('a' + rank.rank())), "api test");
  });
  for (const auto& g : got) EXPECT_EQ(g, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(error_of([] { sf::run_threads(2, [](sf::Rank& r) {
              if (r.rank() == 1) throw symmflow::Error(symmflow::ErrorCode::InvalidUsage, "boom");
            }); }),
            "rank 1: boom");
}

// A runtime started outside the api (here the runtime layer's run_threads; a store transport's
// init_store the same way) joins through Rank(Runtime&).
TEST(ApiSession, AnExistingRuntimeJoinsThroughRank) {
  sf::CompiledProgram compiled = sf::compile(sf::Program::parse_file(example("input_allreduce.sf"), 2));
  std::vector<double> first(2);
  symmflow::run_threads(2, [&](symmflow::Runtime& rt) {
    sf::Rank rank(rt);
    sf::Session session(compiled, rank);
    Tensor x = Tensor::full({32, 64}, DType::f32, double(rank.rank() + 1));
    first[size_t(rank.rank())] = session.run({x})[0].to_doubles()[0];
  });
  EXPECT_EQ(first, (std::vector<double>{3.0, 3.0}));  // 1 + 2 on both ranks
}

// A group name the runtime already has must mean the same members in a later program: a split
// {0, 1}, {2, 3} named "g" and then a program declaring g = {0, 2}, {1, 3} is refused on every
// rank, not run over the old members (same size, so only the members tell them apart).
TEST(ApiSession, AGroupNameReusedForOtherMembersIsRefused) {
  auto program = [](const std::string& split) {
    return sf::compile(sf::Program::parse(
        "group g = " + split + "\ngraph p(x: f32[4]) {\n  r = symm_mem::one_shot_all_reduce(x, "
        "\"sum\", \"g\")\n  return r\n}\n", {"p.sf", 4}));
  };
  sf::CompiledProgram first = program("{0, 1}, {2, 3}"), same = program("{0, 1}, {2, 3}"),
                      other = program("{0, 2}, {1, 3}");
  std::vector<std::string> errors(4);
  sf::run_threads(4, [&](sf::Rank& rank) {
    sf::Session a(first, rank);
    sf::Session b(same, rank);  // the same members: reused
    errors[size_t(rank.rank())] = error_of([&] { sf::Session c(other, rank); });
  });
  EXPECT_EQ(errors[0], "group 'g' is ranks [0, 1] on this runtime but the graph declares [0, 2] "
                       "for rank 0");
  EXPECT_EQ(errors[3], "group 'g' is ranks [2, 3] on this runtime but the graph declares [1, 3] "
                       "for rank 3");
}

// run_into agrees on the bound inputs before its own checks, as run() does: a rank that binds
// another shape does not raise alone while its peer waits; every rank names the input.
TEST(ApiSession, RunIntoRanksBindingDifferentShapesAllNameTheInput) {
  sf::CompiledProgram compiled =
      sf::compile(sf::Program::parse_file(example("input_allreduce.sf"), 2));
  std::mutex mutex;
  std::vector<std::string> errors(2);
  sf::run_threads(2, [&](sf::Rank& rank) {
    sf::Session session(compiled, rank);
    const symmflow::Shape shape =
        rank.rank() == 1 ? symmflow::Shape{16, 64} : symmflow::Shape{32, 64};
    std::vector<float> in = values(symmflow::numel(shape), rank.rank(), 0), out(32 * 64);
    std::string e = error_of(
        [&] { session.run_into({view_of(in, shape)}, {view_of(out, {32, 64})}); });
    std::lock_guard lock(mutex);
    errors[size_t(rank.rank())] = e;
  });
  for (const std::string& e : errors) {
    EXPECT_THAT(e, ::testing::HasSubstr("input 'x'")) << e;
    EXPECT_THAT(e, ::testing::HasSubstr("bind different inputs (rank agreement)")) << e;
    EXPECT_THAT(e, ::testing::HasSubstr("rank 0 binds f32[32, 64] strides [64, 1], rank 1 binds "
                                        "f32[16, 64] strides [64, 1]")) << e;
  }
}
