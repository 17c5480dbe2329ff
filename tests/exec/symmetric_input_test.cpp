// Note [symmetric inputs bound in place] (src/exec/executable.cpp): an input that already lies in
// symmetric memory of its staging buffer's group is bound without a copy on 1, 2 and 4 ranks,
// with results equal to the interpreter's element for element; other groups and regular memory
// are copied; ranks that bind differently raise on every rank naming the input.
#include <cstring>

#include <gtest/gtest.h>

#include "support/errors.hpp"
#include "support/graphs.hpp"
#include "support/tensors.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/interpret.hpp"
#include "symmflow/runtime/heap.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow {
namespace {

using exec::Executable;
using testing::make_input;

const char* kSource = R"sf(group tp
graph g(x: f32[8, 4], y: f32[8, 4]) {
  r = symm_mem::one_shot_all_reduce(x, "sum", "tp")
  b = aten::mul.Tensor(r, y)
  return b
}
)sf";
const char* kPlanned = R"sf(group tp
graph g(x: f32[8, 4], y: f32[8, 4]) {
  x_s = copy(x) @ symm[tp] {copy = "input", reason = "graph input 'x' feeds symm arg 'input' of symm_mem::one_shot_all_reduce (group tp)"}
  r = symm_mem::one_shot_all_reduce(x_s, "sum", "tp") @ regular
  b = aten::mul.Tensor(r, y) @ regular
  return b
}
)sf";

std::vector<int> all_ranks(int w) {
  std::vector<int> ranks;
  for (int r = 0; r < w; ++r) ranks.push_back(r);
  return ranks;
}

class SymmetricInputTest : public ::testing::TestWithParam<int> {};

TEST_P(SymmetricInputTest, BoundInPlaceWithoutACopy) {
  const int w = GetParam();
  auto plan = testing::plan_text(kPlanned, w);
  std::shared_ptr<const ir::Graph> source = testing::parse(kSource, w);
  run_threads(w, [&](Runtime& rt) {
    rt.new_group("tp", all_ranks(w));
    Executable exe(plan);
    Tensor t = empty_symmetric({8, 4}, DType::f32, "tp");
    Tensor y = make_input({8, 4}, DType::f32, rt.rank(), 2);
    for (int seed : {1, 3}) {  // twice: the caller refills its tensor between runs
      Tensor x = make_input({8, 4}, DType::f32, rt.rank(), seed);
      std::memcpy(t.raw_data(), x.raw_data(), x.nbytes());
      std::vector<Tensor> want = exec::interpret(*source, {x, y});
      std::vector<Tensor> got = exe.run({t, y});
      testing::expect_same(got[0], want[0], "symmetric input bound in place");
      EXPECT_EQ(exe.last_stats().copies, 0u);
      EXPECT_EQ(exe.last_stats().bytes_copied, 0u);
      EXPECT_EQ(exe.last_stats().input_copies_skipped, 1u);
    }
    // The staging buffer was never written, and it is what input_handle hands out again.
    testing::expect_same(exe.buffer("x_s"), Tensor::empty({8, 4}, DType::f32), "x_s untouched");
    EXPECT_EQ(exe.input_handle(0).raw_data(), exe.buffer("x_s").raw_data());
    // Regular memory after a run bound in place: copied into the staging buffer again.
    Tensor x = make_input({8, 4}, DType::f32, rt.rank(), 5);
    std::vector<Tensor> got = exe.run({x, y});
    testing::expect_same(got[0], exec::interpret(*source, {x, y})[0], "copy after in place");
    EXPECT_EQ(exe.last_stats().copies, 1u);
    EXPECT_EQ(exe.last_stats().input_copies_skipped, 0u);
  });
}

TEST_P(SymmetricInputTest, AnotherGroupIsCopied) {
  const int w = GetParam();
  auto plan = testing::plan_text(kPlanned, w);
  std::shared_ptr<const ir::Graph> source = testing::parse(kSource, w);
  run_threads(w, [&](Runtime& rt) {
    Executable exe(plan);
    Tensor t = empty_symmetric({8, 4}, DType::f32, "world");  // symmetric, but not in tp
    Tensor x = make_input({8, 4}, DType::f32, rt.rank(), 1);
    Tensor y = make_input({8, 4}, DType::f32, rt.rank(), 2);
    std::memcpy(t.raw_data(), x.raw_data(), x.nbytes());
    std::vector<Tensor> got = exe.run({t, y});
    testing::expect_same(got[0], exec::interpret(*source, {x, y})[0], "another group");
    EXPECT_EQ(exe.last_stats().copies, 1u);
    EXPECT_EQ(exe.last_stats().input_copies_skipped, 0u);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, SymmetricInputTest, ::testing::Values(1, 2, 4));

TEST(SymmetricInput, RanksThatBindDifferentlyRaiseOnEveryRank) {
  auto plan = testing::plan_text(kPlanned, 2);
  std::vector<std::string> errors(2);
  run_threads(2, [&](Runtime& rt) {
    rt.new_group("tp", {0, 1});
    Executable exe(plan);
    Tensor t = empty_symmetric({8, 4}, DType::f32, "tp");
    const uint64_t seq = static_cast<const SymmetricStorage&>(*t.storage()).heap()->seq();
    Tensor mine = rt.rank() == 0 ? t : Tensor::empty({8, 4}, DType::f32);
    Tensor y = Tensor::empty({8, 4}, DType::f32);
    errors[size_t(rt.rank())] = testing::error_of([&] { exe.run({mine, y}); });
    EXPECT_EQ(errors[size_t(rt.rank())],
              fmt::format("run: the ranks of program 'g' bind different inputs (rank agreement):\n"
                          "  input 'x' (<input>:2): rank 0 binds f32[8, 4] strides [4, 1] in "
                          "symmetric heap {} of group 'tp' at byte 0, rank 1 binds f32[8, 4] "
                          "strides [4, 1]",
                          seq));
  });
}

}  // namespace
}  // namespace symmflow
