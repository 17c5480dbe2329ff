// The one algorithm rule (kernels/algorithm.hpp) that the cuda Communicator runs and explain
// prints: the cuda all-reduce choice at sizes around its two limits, world sizes 1..8, aligned or
// not, and the descriptions explain shows, including a tunable override.
#include <gtest/gtest.h>

#include "symmflow/core/dtype.hpp"
#include "symmflow/kernels/algorithm.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow {
namespace {

using kernels::AllReduceAlgorithm;
using kernels::cuda_all_reduce_algorithm;
using kernels::kCudaLLMaxBytes;

// Restores the tunables a test changed.
class AlgorithmTest : public ::testing::Test {
 protected:
  void TearDown() override { set_tunables(saved_); }
  Tunables saved_ = tunables();
};

TEST_F(AlgorithmTest, OneRankIsACopy) {
  for (int64_t bytes : {int64_t(0), int64_t(8), kCudaLLMaxBytes, int64_t(64) << 20}) {
    EXPECT_EQ(cuda_all_reduce_algorithm(bytes, 1, false, true), AllReduceAlgorithm::copy);
    EXPECT_EQ(cuda_all_reduce_algorithm(bytes, 1, true, true), AllReduceAlgorithm::copy);
  }
}

TEST_F(AlgorithmTest, OneShotTakesLinesUpToTheLLLimit) {
  for (int world = 2; world <= 8; ++world) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      const int64_t size = int64_t(dtype_size(dtype));
      const int64_t at_limit = kCudaLLMaxBytes / size * size;
      SCOPED_TRACE(testing::Message() << "world " << world << " " << dtype_name(dtype));
      EXPECT_EQ(cuda_all_reduce_algorithm(4 * size, world, false, true),
                size * 4 % 8 == 0 ? AllReduceAlgorithm::one_shot_ll : AllReduceAlgorithm::one_shot);
      EXPECT_EQ(cuda_all_reduce_algorithm(at_limit, world, false, true),
                AllReduceAlgorithm::one_shot_ll);
      EXPECT_EQ(cuda_all_reduce_algorithm(at_limit + 8, world, false, true),
                AllReduceAlgorithm::one_shot);
      // An odd element count of 2-byte elements is no whole line; unaligned addresses neither.
      EXPECT_EQ(cuda_all_reduce_algorithm(3 * 2, world, false, true), AllReduceAlgorithm::one_shot);
      EXPECT_EQ(cuda_all_reduce_algorithm(1024, world, false, false), AllReduceAlgorithm::one_shot);
      // one_shot ops never take two_shot, however large.
      EXPECT_EQ(cuda_all_reduce_algorithm(int64_t(1) << 30, world, false, true),
                AllReduceAlgorithm::one_shot);
    }
  }
}

TEST_F(AlgorithmTest, InPlaceTakesTwoShotAboveTheTunable) {
  ASSERT_EQ(tunables().cuda_one_shot_max_bytes, int64_t(4) << 20);
  // Note [one-shot limit per world]: 4 MiB at 2 ranks, x 2 / world above.
  const std::pair<int, int64_t> limits[] = {
      {2, int64_t(4) << 20}, {3, (int64_t(8) << 20) / 3}, {4, int64_t(2) << 20}, {8, int64_t(1) << 20}};
  for (auto [world, limit] : limits) {
    SCOPED_TRACE(testing::Message() << "world " << world);
    EXPECT_EQ(kernels::cuda_one_shot_limit(world), limit);
    EXPECT_EQ(cuda_all_reduce_algorithm(8192, world, true, true), AllReduceAlgorithm::one_shot_ll);
    EXPECT_EQ(cuda_all_reduce_algorithm(limit, world, true, true), AllReduceAlgorithm::one_shot);
    EXPECT_EQ(cuda_all_reduce_algorithm(limit + 2, world, true, true),
              AllReduceAlgorithm::two_shot);
    // The op that says one_shot keeps it at any size.
    EXPECT_EQ(cuda_all_reduce_algorithm(limit + 2, world, false, true),
              AllReduceAlgorithm::one_shot);
  }
  Tunables t = tunables();
  t.cuda_one_shot_max_bytes = 4096;
  set_tunables(t);
  EXPECT_EQ(cuda_all_reduce_algorithm(4096, 2, true, true), AllReduceAlgorithm::one_shot_ll);
  EXPECT_EQ(cuda_all_reduce_algorithm(4104, 2, true, true), AllReduceAlgorithm::two_shot);
  EXPECT_EQ(cuda_all_reduce_algorithm(4104, 2, false, true), AllReduceAlgorithm::one_shot_ll);
}

TEST_F(AlgorithmTest, ExplainDescribesTheSameChoice) {
  auto two_shot = kernels::collective_algorithm("symm_mem::two_shot_all_reduce_", 8192, 2);
  EXPECT_EQ(two_shot.cpu, "two_shot");
  EXPECT_EQ(two_shot.cuda, "one_shot_ll in place");
  EXPECT_EQ(two_shot.why,
            "cuda: one_shot up to 4194304 B at 2 ranks (cuda_one_shot_max_bytes = 4194304 B, x 2 / "
            "ranks above 2 ranks), two_shot above");
  EXPECT_EQ(kernels::collective_algorithm("two_shot_all_reduce_out", 8 << 20, 4).cuda, "two_shot");
  auto four = kernels::collective_algorithm("symm_mem::two_shot_all_reduce_", 3 << 20, 4);
  EXPECT_EQ(four.cuda, "two_shot");
  EXPECT_EQ(four.why,
            "cuda: one_shot up to 2097152 B at 4 ranks (cuda_one_shot_max_bytes = 4194304 B, x 2 / "
            "ranks above 2 ranks), two_shot above");
  EXPECT_EQ(kernels::collective_algorithm("symm_mem::two_shot_all_reduce_", 3 << 20, 2).cuda,
            "one_shot in place");
  EXPECT_EQ(kernels::collective_algorithm("symm_mem::two_shot_all_reduce_", 8 << 20, 1).cuda, "copy");
  auto one_shot = kernels::collective_algorithm("symm_mem::one_shot_all_reduce", 1 << 20, 8);
  EXPECT_EQ(one_shot.cpu, "one_shot");
  EXPECT_EQ(one_shot.cuda, "one_shot");
  EXPECT_EQ(kernels::collective_algorithm("symm_mem::one_shot_all_reduce_out", 64, 2).cuda,
            "one_shot_ll");
  Tunables t = tunables();
  t.cuda_one_shot_max_bytes = 4096;
  set_tunables(t);
  two_shot = kernels::collective_algorithm("symm_mem::two_shot_all_reduce_", 8192, 2);
  EXPECT_EQ(two_shot.cuda, "two_shot");
  EXPECT_EQ(two_shot.why,
            "cuda: one_shot up to 4096 B at 2 ranks (cuda_one_shot_max_bytes = 4096 B, x 2 / ranks "
            "above 2 ranks), two_shot above");
}

TEST_F(AlgorithmTest, OtherCollectivesAndNonCollectives) {
  auto gather = kernels::collective_algorithm("symm_mem::all_gather_out", 1024, 4);
  EXPECT_EQ(gather.cpu, "pull");
  EXPECT_EQ(gather.cuda, "pull");
  EXPECT_EQ(gather.why, "barrier, read every peer's input, barrier");
  EXPECT_EQ(kernels::collective_algorithm("symm_mem::all_gather_out", 1024, 1).cuda, "local");
  EXPECT_EQ(kernels::collective_algorithm("symm_mem::wait_signal", 0, 1).cuda, "wait");
  EXPECT_EQ(kernels::collective_algorithm("symm_mem::multimem_all_reduce_", 64, 2).cuda,
            "refused");
  auto none = kernels::collective_algorithm("aten::mm", 1024, 4);
  EXPECT_TRUE(none.cpu.empty() && none.cuda.empty() && none.why.empty());
}

// The fused all-reduce + rms_norm follows the all-reduce's rule on GPUs (Note [fused all-reduce
// rms_norm on GPUs]): one_shot_ll up to kCudaLLMaxBytes, one_shot up to the limit, two_shot above;
// nothing to exchange at one rank.
TEST_F(AlgorithmTest, FusedAllReduceRmsNormFollowsTheAllReduceRule) {
  const std::string op = "symm_mem::fused_all_reduce_add_rms_norm";
  EXPECT_EQ(kernels::collective_algorithm(op, 8192, 2).cuda, "one_shot_ll+norm");
  EXPECT_EQ(kernels::collective_algorithm(op, kernels::kCudaLLMaxBytes, 4).cuda,
            "one_shot_ll+norm");
  EXPECT_EQ(kernels::collective_algorithm(op, kernels::kCudaLLMaxBytes + 8, 2).cuda,
            "one_shot+norm");
  EXPECT_EQ(kernels::collective_algorithm(op, 4 << 20, 2).cuda, "one_shot+norm");
  EXPECT_EQ(kernels::collective_algorithm(op, (4 << 20) + 2, 2).cuda, "two_shot+norm");
  EXPECT_EQ(kernels::collective_algorithm(op, 3 << 20, 4).cuda, "two_shot+norm");
  EXPECT_EQ(kernels::collective_algorithm(op, 3 << 20, 4).cpu, "one_shot+norm");
  EXPECT_EQ(kernels::collective_algorithm("fused_all_reduce_add_rms_norm_out", 16 << 20, 1).cuda,
            "local");
  EXPECT_NE(kernels::collective_algorithm(op, 64, 2).why.find("two_shot above; then residual add"),
            std::string::npos);
}

}  // namespace
}  // namespace symmflow
