// Ops with several results through the whole pipeline (Note [list returns] in
// symmflow/schema/schema.hpp): a program whose split_with_sizes, split.Tensor and
// native_layer_norm results feed further ops (one piece unused, one returned, a view of a graph
// input returned) and one-shot all-reduces, compiled and run at 1 and 2 ranks (threads) and
// compared bit for bit with the eager interpreter. The collective inputs are produced in
// symmetric memory with no copy: a fresh result of an op on a split piece, a fresh result of
// native_layer_norm, and a split piece itself (its base, the matmul's result, is placed in
// symm[tp], following the view as for slice.Tensor). The typed plan gives each piece its own
// result id, aliasing self.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/errors.hpp"
#include "support/graphs.hpp"
#include "support/tensors.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/interpret.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow {
namespace {

constexpr const char* kProgram = R"(group tp
graph multi_result(x: f32[8, 16], w: f32[16, 16], g: f32[16], b: f32[16]) {
  h = aten::mm(x, w)
  a, c, unused = aten::split_with_sizes(h, [2, 4, 2])
  left, right = aten::split.Tensor(x, 10, 1)
  y, mean, rstd = aten::native_layer_norm(c, [16], g, b, 1e-05)
  e = aten::mul.Tensor(a, a)
  s = symm_mem::one_shot_all_reduce(e, "sum", "tp")
  t = symm_mem::one_shot_all_reduce(y, "sum", "tp")
  u = symm_mem::one_shot_all_reduce(a, "sum", "tp")
  l2 = aten::mul.Scalar(left, 2)
  return s, t, u, right, rstd, l2
}
)";

ir::Layout layout_of(const passes::Plan& plan, const std::string& name) {
  const ir::Value* v = plan.graph->find_value(name);
  EXPECT_NE(v, nullptr) << name;
  return v ? v->layout() : ir::Layout{};
}

TEST(MultiResult, TextIsAFixedPointAndNamesAreCounted) {
  auto g = testing::parse(kProgram, 2);
  const std::string printed = ir::print_graph(*g);
  EXPECT_EQ(printed, kProgram);
  EXPECT_EQ(ir::print_graph(*testing::parse(printed, 2)), printed);
  const ir::Node* split = g->find_value("a")->producer();
  ASSERT_EQ(split->outputs().size(), 3u);
  EXPECT_EQ(split->result_count(), 3u);
  EXPECT_TRUE(split->op()->has(Tag::view));
  for (size_t r = 0; r < 3; ++r) EXPECT_EQ(split->op()->aliases().output_alias(r), 0);
  EXPECT_EQ(g->find_value("unused")->type().shape, (Shape{2, 16}));
  EXPECT_EQ(g->find_value("right")->type().shape, (Shape{8, 6}));
  EXPECT_EQ(g->find_value("rstd")->type(), (ir::TensorType{DType::f32, {8 - 6 + 2, 1}}));

  const std::string wrong = R"(graph g(x: f32[8, 4]) {
  a, b = aten::split_with_sizes(x, [2, 2, 4])
  return a
}
)";
  EXPECT_NE(testing::error_of([&] { testing::parse(wrong); })
                .find("aten::split_with_sizes returns 3 values but 2 names are assigned"),
            std::string::npos);
}

// Note [sibling regions] (passes/fuse_pointwise.cpp): SiLU's backward, whose two products read
// one sigmoid, compiles to one fused step with two results, which the CPU's fused executor runs
// bit for bit as the interpreter runs the ops, at a size that crosses its chunks (5 x 1031).
TEST(MultiResult, SiblingRegionsRunAsOneStepWithTwoResults) {
  for (const char* dt : {"f32", "bf16"}) {
    const std::string text = fmt::format(R"(graph silu_backward(x: {0}[5, 1031], u: {0}[5, 1031], g: {0}[5, 1031]) {{
  s = aten::sigmoid(x)
  xs = aten::mul.Tensor(x, s)
  du = aten::mul.Tensor(g, xs)
  gu = aten::mul.Tensor(g, u)
  gus = aten::mul.Tensor(gu, s)
  one_s = aten::rsub.Scalar(s, 1)
  xo = aten::mul.Tensor(x, one_s)
  xo1 = aten::add.Scalar(xo, 1)
  dx = aten::mul.Tensor(gus, xo1)
  return du, dx
}}
)", dt);
    auto plan = passes::compile(testing::parse(text));
    ASSERT_EQ(plan->steps.size(), 1u) << dt;
    EXPECT_EQ(plan->steps[0].kind, passes::StepKind::fused) << dt;
    EXPECT_EQ(plan->steps[0].results.size(), 2u) << dt;
    exec::Executable exe(plan);
    const DType dtype = std::string(dt) == "f32" ? DType::f32 : DType::bf16;
    for (int seed = 0; seed < 2; ++seed) {
      std::vector<Tensor> in;
      for (int k = 0; k < 3; ++k) in.push_back(testing::make_input({5, 1031}, dtype, 0, seed + k));
      std::vector<Tensor> got = exe.run(in);
      std::vector<Tensor> want = exec::interpret(*testing::parse(text), in);
      ASSERT_EQ(got.size(), 2u);
      for (size_t i = 0; i < 2; ++i)
        testing::expect_same(got[i], want[i], fmt::format("{} output {} seed {}", dt, i, seed));
    }
  }
}

class MultiResultRun : public ::testing::TestWithParam<int> {};

TEST_P(MultiResultRun, CompilesRunsAndEqualsTheInterpreter) {
  const int world = GetParam();
  auto plan = passes::compile(testing::parse(kProgram, world));
  // Collective inputs in symmetric memory, with no copy the compiler added.
  EXPECT_TRUE(plan->copies.empty());
  EXPECT_EQ(layout_of(*plan, "e"), ir::Layout::symm("tp"));
  EXPECT_EQ(layout_of(*plan, "y"), ir::Layout::symm("tp"));
  EXPECT_EQ(layout_of(*plan, "h"), ir::Layout::symm("tp"));  // `a`, a piece of h, is reduced
  // The split's step: one result id per piece, each aliasing argument 0 (self).
  bool found = false;
  for (const passes::PlanStep& step : plan->steps) {
    if (!step.op.op || step.op.op->name() != "aten::split_with_sizes") continue;
    found = true;
    EXPECT_EQ(step.results.size(), 3u);
    EXPECT_EQ(step.result_aliases, (std::vector<int>{0, 0, 0}));
  }
  EXPECT_TRUE(found);

  std::shared_ptr<const ir::Graph> source = testing::parse(kProgram, world);
  run_threads(world, [&](Runtime& rt) {
    exec::Executable exe(plan);
    for (int seed = 0; seed < 2; ++seed) {
      std::vector<Tensor> in{testing::make_input({8, 16}, DType::f32, rt.rank(), seed),
                             testing::make_input({16, 16}, DType::f32, rt.rank(), seed + 1),
                             testing::make_input({16}, DType::f32, rt.rank(), seed + 2),
                             testing::make_input({16}, DType::f32, rt.rank(), seed + 3)};
      std::vector<Tensor> got = exe.run(in);
      std::vector<Tensor> want = exec::interpret(*source, in);
      ASSERT_EQ(got.size(), 6u);
      ASSERT_EQ(want.size(), 6u);
      for (size_t i = 0; i < got.size(); ++i) {
        testing::expect_same(got[i], want[i],
                             fmt::format("output {} seed {} rank {}", i, seed, rt.rank()));
      }
      // `right` is x's last 6 columns.
      for (int64_t r = 0; r < 8; ++r) {
        for (int64_t k = 0; k < 6; ++k) {
          ASSERT_EQ(got[3].item_as_double(std::vector<int64_t>{r, k}),
                    in[0].item_as_double(std::vector<int64_t>{r, 10 + k}));
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, MultiResultRun, ::testing::Values(1, 2),
                         [](const auto& p) { return fmt::format("w{}", p.param); });

}  // namespace
}  // namespace symmflow
