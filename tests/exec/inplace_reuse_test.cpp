// Buffer reuse of in-place collectives (Note [synchronised peer writes] in
// passes/live_ranges.cpp): a 32-layer model of in-place two-shot all-reduces plans a symmetric
// pool of exactly two layers' buffers, layer l + 2 reuses layer l's offset, and the plan gives the
// eager interpreter's results on every element at 2, 3 and 4 ranks (threads), run after run.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/graphs.hpp"
#include "support/tensors.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/interpret.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow {
namespace {

constexpr int kLayers = 32;
constexpr size_t kLayerBytes = 16 * 64 * 4;  // one f32[16, 64] activation

// h_l = two_shot_all_reduce_(mm(h_{l-1}, w_l)) in place; `residual` adds h_{l-2} to each layer's
// input from layer 2 on, so each all-reduced value is read again one layer later.
std::string layers_text(bool residual) {
  std::string params = "x: f32[16, 64]";
  std::string body;
  std::string in = "x";
  for (int l = 0; l < kLayers; ++l) {
    params += fmt::format(", w{}: f32[64, 64]", l);
    if (residual && l >= 2) {
      body += fmt::format("  a{} = aten::add.Tensor({}, h{})\n", l, in, l - 2);
      in = fmt::format("a{}", l);
    }
    body += fmt::format("  h{} = aten::mm({}, w{})\n", l, in, l);
    body += fmt::format("  symm_mem::two_shot_all_reduce_(h{}, \"sum\", \"tp\")\n", l);
    in = fmt::format("h{}", l);
  }
  return fmt::format("group tp\ngraph layers({}) {{\n{}  return {}\n}}\n", params, body, in);
}

// Weights scaled by 1/16 (exact) so that 32 layers neither overflow nor vanish.
std::vector<Tensor> layer_inputs(int rank, int seed) {
  std::vector<Tensor> in{testing::make_input({16, 64}, DType::f32, rank, seed)};
  for (int l = 0; l < kLayers; ++l) {
    Tensor w = testing::make_input({64, 64}, DType::f32, rank, seed + 1 + l);
    TensorView v = w.view();
    std::vector<double> d = w.to_doubles();
    for (size_t i = 0; i < d.size(); ++i) store_double(v, int64_t(i), d[i] / 16);
    in.push_back(w);
  }
  return in;
}

// The result is neither vanished nor overflowed, so comparing it says something.
void expect_ordinary_magnitude(const Tensor& t) {
  double largest = 0;
  for (double v : t.to_doubles()) largest = std::max(largest, std::abs(v));
  EXPECT_GT(largest, 1e-6);
  EXPECT_LT(largest, 1e30);
}

const passes::BufferPlan& buffer(const passes::Plan& plan, const std::string& name) {
  return plan.buffers[size_t(plan.buffer_of.at(plan.graph->find_value(name)))];
}

const passes::PoolPlan& symm_pool(const passes::Plan& plan) {
  for (const passes::PoolPlan& p : plan.pools) {
    if (p.name == "symm[tp]") return p;
  }
  throw std::runtime_error("no symm[tp] pool");
}

class InplaceReuse : public ::testing::TestWithParam<int> {};

TEST_P(InplaceReuse, ThirtyTwoLayersNeedTwoLayersOfSymmetricMemory) {
  const int w = GetParam();
  auto plan = passes::compile(testing::parse(layers_text(false), w));
  const passes::PoolPlan& pool = symm_pool(*plan);
  EXPECT_EQ(pool.bytes, 2 * kLayerBytes);
  EXPECT_EQ(pool.lower_bound, 2 * kLayerBytes);
  EXPECT_TRUE(plan->copies.empty());
  // Each layer's buffer lives from its matmul to the next layer's matmul, and layer l + 2's
  // collective runs in layer l's bytes.
  for (int l = 0; l + 2 < kLayers; ++l) {
    SCOPED_TRACE(fmt::format("layer {}", l));
    const passes::BufferPlan& h = buffer(*plan, fmt::format("h{}", l));
    const passes::BufferPlan& later = buffer(*plan, fmt::format("h{}", l + 2));
    EXPECT_EQ(h.first_step, 2 * l);
    EXPECT_EQ(h.last_step, 2 * l + 2);
    EXPECT_EQ(h.pool, later.pool);
    EXPECT_EQ(h.offset, later.offset);
    EXPECT_LT(h.last_step, later.first_step);
  }
  EXPECT_EQ(buffer(*plan, "h31").last_step, int(plan->steps.size()));  // the output
  std::shared_ptr<const ir::Graph> source = testing::parse(layers_text(false), w);
  run_threads(w, [&](Runtime& rt) {
    exec::Executable exe(plan);
    for (int seed = 0; seed < 3; ++seed) {
      std::vector<Tensor> in = layer_inputs(rt.rank(), seed);
      std::vector<Tensor> got = exe.run(in);
      std::vector<Tensor> want = exec::interpret(*source, in);
      ASSERT_EQ(got.size(), 1u);
      expect_ordinary_magnitude(want[0]);
      testing::expect_same(got[0], want[0], fmt::format("seed {} rank {}", seed, rt.rank()));
    }
  });
}

// A value read again after the next layer's collective (a_l = h_{l-1} + h_{l-2}) stays live to
// that read, and the buffers still reuse: h_{l-2} dies at the add, before h_l's matmul, so two
// layers' buffers at any step.
TEST_P(InplaceReuse, AResidualReadKeepsTheBufferToItsLastRead) {
  const int w = GetParam();
  auto plan = passes::compile(testing::parse(layers_text(true), w));
  const passes::PoolPlan& pool = symm_pool(*plan);
  EXPECT_EQ(pool.lower_bound, 2 * kLayerBytes);
  EXPECT_EQ(pool.bytes, 2 * kLayerBytes);
  const ir::Value* a4 = plan->graph->find_value("a4");
  ASSERT_NE(a4, nullptr);
  EXPECT_EQ(buffer(*plan, "h2").last_step, int(plan->graph->position(a4->producer())));
  std::shared_ptr<const ir::Graph> source = testing::parse(layers_text(true), w);
  run_threads(w, [&](Runtime& rt) {
    exec::Executable exe(plan);
    for (int seed = 0; seed < 2; ++seed) {
      std::vector<Tensor> in = layer_inputs(rt.rank(), seed);
      std::vector<Tensor> got = exe.run(in);
      std::vector<Tensor> want = exec::interpret(*source, in);
      ASSERT_EQ(got.size(), 1u);
      expect_ordinary_magnitude(want[0]);
      testing::expect_same(got[0], want[0], fmt::format("seed {} rank {}", seed, rt.rank()));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, InplaceReuse, ::testing::Values(2, 3, 4),
                         [](const auto& p) { return fmt::format("w{}", p.param); });

}  // namespace
}  // namespace symmflow
