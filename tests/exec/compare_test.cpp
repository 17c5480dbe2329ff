// exec::rounding_depth, check_tolerance and compare (Note [check tolerance] in exec/compare.hpp):
// the depth counts rounding ops on the longest chain (views and compiler copies add none, a
// mutation gives the written value its depth), the tolerance grows with its square root, and
// compare checks every element against max(|expected|, rms) and reports the largest error.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "support/graphs.hpp"
#include "symmflow/exec/compare.hpp"
#include "symmflow/passes/pipeline.hpp"

namespace symmflow {
namespace {

int output_depth(const std::string& text, size_t output = 0) {
  std::unique_ptr<ir::Graph> g = testing::parse(text);
  return exec::rounding_depth(*g, g->outputs().at(output));
}

TEST(RoundingDepth, TwoPerLayerOfTheTensorParallelMlp) {
  for (int layers : {1, 3, 8}) {
    EXPECT_EQ(output_depth(testing::tp_mlp_text(layers, false)), 2 * layers) << layers;
  }
}

TEST(RoundingDepth, ViewsAddNothing) {
  EXPECT_EQ(output_depth("graph g(x: bf16[2, 4]) {\n"
                         "  y = aten::relu(x)\n"
                         "  v = aten::view(y, [4, 2])\n"
                         "  t = aten::t(v)\n"
                         "  z = aten::relu(t)\n"
                         "  return z\n}\n"),
            2);
}

TEST(RoundingDepth, TheLongestChainCounts) {
  const std::string text =
      "graph g(x: f32[8]) {\n"
      "  a = aten::relu(x)\n"
      "  b = aten::mul.Scalar(a, 2.0)\n"
      "  c = aten::add.Scalar(b, 1.0)\n"
      "  d = aten::add.Tensor(x, c)\n"
      "  return d, a\n}\n";
  EXPECT_EQ(output_depth(text, 0), 4);
  EXPECT_EQ(output_depth(text, 1), 1);
}

TEST(RoundingDepth, AMutationGivesTheWrittenValueItsDepth) {
  EXPECT_EQ(output_depth("group tp\n"
                         "graph g(x: f32[32, 64]) {\n"
                         "  y = aten::mul.Scalar(x, 2.0)\n"
                         "  symm_mem::two_shot_all_reduce_(y, \"sum\", \"tp\")\n"
                         "  z = aten::add.Scalar(y, 1.0)\n"
                         "  return z\n}\n"),
            3);
}

// A compiled graph: compiler copies add nothing, a fused region its body's ops.
TEST(RoundingDepth, CopiesAddNothingAndFusedRegionsTheirBody) {
  auto plan = passes::compile(testing::parse(R"(group tp
graph g(x: f32[64]) {
  r = symm_mem::one_shot_all_reduce(x, "sum", "tp")
  a = aten::relu(r)
  b = aten::mul.Scalar(a, 2.0)
  c = aten::add.Scalar(b, 1.0)
  return c
}
)",
                                             2));
  int copies = 0, fused = 0;
  for (const ir::Node* n : plan->graph->nodes()) {
    copies += n->kind() == ir::NodeKind::copy;
    fused += n->kind() == ir::NodeKind::fused;
  }
  ASSERT_EQ(copies, 1) << "the graph input is copied into symmetric memory";
  ASSERT_EQ(fused, 1) << "relu, mul and add are one region";
  EXPECT_EQ(exec::rounding_depth(*plan->graph, plan->graph->outputs().at(0)), 4);
}

TEST(RoundingDepth, AnInputReturnedAsIsCountsOne) {
  EXPECT_EQ(output_depth("graph g(x: f32[3]) {\n  return x\n}\n"), 1);
}

TEST(RoundingDepth, AValueOfAnotherGraphIsRefused) {
  std::unique_ptr<ir::Graph> g = testing::parse("graph g(x: f32[3]) {\n  return x\n}\n");
  std::unique_ptr<ir::Graph> h = testing::parse("graph h(y: f32[3]) {\n  return y\n}\n");
  for (const ir::Value* foreign : {h->inputs().at(0), h->outputs().at(0)}) {
    try {
      exec::rounding_depth(*g, foreign);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "rounding_depth: value 'y' is not a value of graph 'g'");
    }
  }
  std::unique_ptr<ir::Graph> k =
      testing::parse("graph k(y: f32[3]) {\n  z = aten::relu(y)\n  return z\n}\n");
  EXPECT_THROW(exec::rounding_depth(*g, k->outputs().at(0)), Error);
}

TEST(CheckTolerance, BasePerDtypeTimesTheSquareRootOfTheDepth) {
  EXPECT_DOUBLE_EQ(exec::check_tolerance(DType::f32, 1), 1e-5);
  EXPECT_DOUBLE_EQ(exec::check_tolerance(DType::f64, 4), 2e-12);
  EXPECT_DOUBLE_EQ(exec::check_tolerance(DType::f16, 0), 2e-2);
  EXPECT_DOUBLE_EQ(exec::check_tolerance(DType::bf16, 16), 8e-2);
  EXPECT_DOUBLE_EQ(exec::check_tolerance(DType::i32, 100), 0);
  EXPECT_DOUBLE_EQ(exec::check_tolerance(DType::i64, 1), 0);
}

TEST(Compare, EveryElementAgainstTheLargerOfItsValueAndTheRms) {
  // want {20, 0, 0, 0}: rms 10.
  Tensor want = Tensor::from_vector<double>({20, 0, 0, 0}, {4});
  const double tol = 0.01;
  // Element 1: allowed 0.01 * max(0, 10) = 0.1.
  exec::Comparison in = exec::compare(Tensor::from_vector<double>({20, 0.05, 0, 0}, {4}), want,
                                      tol, "out");
  EXPECT_FALSE(in.mismatch);
  EXPECT_NEAR(in.worst, 0.5, 1e-12);
  exec::Comparison out = exec::compare(Tensor::from_vector<double>({20, 0, 0, -0.15}, {4}), want,
                                       tol, "out");
  ASSERT_TRUE(out.mismatch);
  EXPECT_EQ(*out.mismatch,
            "out element 3: got -0.15, expected 0 (relative tolerance 0.01 for f64)");
  // Element 0: allowed 0.01 * 20 = 0.2.
  EXPECT_FALSE(exec::compare(Tensor::from_vector<double>({20.19, 0, 0, 0}, {4}), want, tol, "o")
                   .mismatch);
  EXPECT_TRUE(exec::compare(Tensor::from_vector<double>({20.21, 0, 0, 0}, {4}), want, tol, "o")
                  .mismatch);
}

TEST(Compare, AnInfinityMatchesOnlyItself) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor want = Tensor::from_vector<double>({1, inf, -inf}, {3});
  EXPECT_FALSE(exec::compare(Tensor::from_vector<double>({1, inf, -inf}, {3}), want, 0.5, "o")
                   .mismatch);
  for (std::vector<double> got : {std::vector<double>{1, 1e300, -inf},
                                  std::vector<double>{1, -inf, -inf},
                                  std::vector<double>{inf, inf, -inf}}) {
    EXPECT_TRUE(exec::compare(Tensor::from_vector<double>(got, {3}), want, 0.5, "o").mismatch)
        << got[0] << " " << got[1];
  }
}

TEST(Compare, HugeValuesKeepAFiniteRms) {
  // Squares of 1e200 overflow; the rms (1e200 / sqrt 2) must not, or everything would pass.
  Tensor want = Tensor::from_vector<double>({1e200, 0}, {2});
  EXPECT_TRUE(exec::compare(Tensor::from_vector<double>({1e200, 1e199}, {2}), want, 1e-3, "o")
                  .mismatch);
  EXPECT_FALSE(exec::compare(Tensor::from_vector<double>({1e200, 1e196}, {2}), want, 1e-3, "o")
                   .mismatch);
}

TEST(Compare, IntegersBeyondTwoToThe53AreExact) {
  const int64_t big = (int64_t(1) << 53) + 1;
  Tensor want = Tensor::from_vector<int64_t>({big}, {1});
  EXPECT_FALSE(exec::compare(Tensor::from_vector<int64_t>({big}, {1}), want, 0, "o").mismatch);
  EXPECT_TRUE(
      exec::compare(Tensor::from_vector<int64_t>({big - 1}, {1}), want, 0, "o").mismatch);
}

TEST(Compare, ExactMatchesNanAndShapes) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor want = Tensor::from_vector<double>({1, nan, 3}, {3});
  exec::Comparison same =
      exec::compare(Tensor::from_vector<double>({1, nan, 3}, {3}), want, 0, "o");
  EXPECT_FALSE(same.mismatch);
  EXPECT_EQ(same.worst, 0);
  EXPECT_TRUE(exec::compare(Tensor::from_vector<double>({1, 2, 3}, {3}), want, 0.5, "o").mismatch);
  EXPECT_TRUE(exec::compare(Tensor::from_vector<double>({1, nan, nan}, {3}), want, 0.5, "o")
                  .mismatch);
  exec::Comparison shape = exec::compare(Tensor::from_vector<double>({1, 2}, {2}), want, 1, "o");
  ASSERT_TRUE(shape.mismatch);
  EXPECT_EQ(*shape.mismatch, "o: got f64[2], expected f64[3]");
  // Integers: tolerance 0, exact.
  Tensor ints = Tensor::from_vector<int32_t>({5, 6}, {2});
  EXPECT_FALSE(exec::compare(ints, Tensor::from_vector<int32_t>({5, 6}, {2}),
                             exec::check_tolerance(DType::i32, 8), "o").mismatch);
  EXPECT_TRUE(exec::compare(ints, Tensor::from_vector<int32_t>({5, 7}, {2}),
                            exec::check_tolerance(DType::i32, 8), "o").mismatch);
}

}  // namespace
}  // namespace symmflow
