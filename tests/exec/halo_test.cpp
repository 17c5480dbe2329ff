// The halo-exchange examples (examples/halo_exchange*.sf), compiled by the whole pipeline and run
// on 1 to 4 ranks, against a naive reference that computes every rank's result from every rank's
// inputs. Several runs of one Executable back to back, each on new inputs: a rank that runs ahead
// must not overwrite what a slow peer still reads (Note [barrier before each run]).
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "support/graphs.hpp"
#include "support/tensors.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/interpret.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow {
namespace {

const Shape kShape{64, 256};

std::string example(const std::string& name) {
  std::ifstream in(std::string(SYMMFLOW_SOURCE_DIR) + "/examples/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// out[r] = a[r-1] + a[r] * 1.000244140625 with a[r] = x[r-1] + (x[r] * 2 + 1), ring indices.
std::vector<float> reference(int w, int rank, int seed) {
  auto x = [&](int r) {
    return testing::make_input(kShape, DType::f32, (r + w) % w, seed).to_doubles();
  };
  auto a = [&](int r) {
    std::vector<double> mine = x(r), prev = x(r - 1);
    std::vector<float> out(mine.size());
    for (size_t i = 0; i < out.size(); ++i) {
      float t0 = float(mine[i]) * 2.0f + 1.0f;
      out[i] = float(prev[i]) + t0;
    }
    return out;
  };
  std::vector<float> mine = a(rank), prev = a(rank - 1 + w);
  std::vector<float> out(mine.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = prev[i] + mine[i] * 1.000244140625f;
  return out;
}

class HaloTest : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(HaloTest, MatchesNaiveReferenceAndEager) {
  const char* file = std::get<0>(GetParam());
  const int w = std::get<1>(GetParam());
  const std::string text = example(file);
  auto plan = passes::compile(ir::parse_graph(text, {file, w}));
  std::shared_ptr<const ir::Graph> source = ir::parse_graph(text, {file, w});
  run_threads(w, [&](Runtime& rt) {
    exec::Executable exe(plan);
    std::vector<std::vector<Tensor>> got;
    for (int seed = 0; seed < 8; ++seed)  // back to back: no sync between runs but run()'s own
      got.push_back(exe.run({testing::make_input(kShape, DType::f32, rt.rank(), seed)}));
    for (int seed = 0; seed < 8; ++seed) {
      std::vector<float> want = reference(w, rt.rank(), seed);
      std::vector<double> have = got[size_t(seed)].at(0).to_doubles();
      ASSERT_EQ(have.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(float(have[i]), want[i])
            << file << " rank " << rt.rank() << " seed " << seed << " element " << i;
      std::vector<Tensor> eager =
          exec::interpret(*source, {testing::make_input(kShape, DType::f32, rt.rank(), seed)});
      testing::expect_same(got[size_t(seed)].at(0), eager.at(0), "eager");
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Examples, HaloTest,
                         ::testing::Combine(::testing::Values("halo_exchange.sf",
                                                              "halo_exchange_signal.sf"),
                                            ::testing::Values(1, 2, 3, 4)),
                         [](const auto& p) {
                           std::string name = std::get<0>(p.param);
                           return name.substr(0, name.size() - 3) + "_w" +
                                  std::to_string(std::get<1>(p.param));
                         });

// A rank-relative argument resolves per rank: rank r sends to r+1 and hears from r-1, for any k.
TEST(RankRelative, ResolvesModuloTheGroup) {
  EXPECT_EQ(ir::resolve_rank_relative(1, 3, 4), 0);
  EXPECT_EQ(ir::resolve_rank_relative(-1, 0, 4), 3);
  EXPECT_EQ(ir::resolve_rank_relative(-9, 1, 4), 0);
  EXPECT_EQ(ir::resolve_rank_relative(5, 0, 1), 0);
  EXPECT_EQ(ir::rank_relative_text(-2), "rank-2");
  EXPECT_EQ(ir::rank_relative_text(0), "rank+0");
}

}  // namespace
}  // namespace symmflow

namespace symmflow {
namespace {

// symm_mem::barrier has no tensor: it runs on the thread's device (ops/call.cpp). A host program
// interpreted or executed on a thread bound to a GPU still passes a host barrier: without the
// guards in interpret and Executable::run this build (no cuda kernels) would raise "has no cuda
// kernel".
TEST(ThreadDevice, TensorlessOpsFollowTheThreadButHostProgramsStayOnTheHost) {
  const std::string text = R"sf(group tp
graph b(x: f32[4]) {
  y = aten::neg(x)
  symm_mem::barrier("tp")
  z = aten::neg(y)
  return z
})sf";
  auto source = std::shared_ptr<ir::Graph>(testing::parse(text, 2));
  auto plan = passes::compile(testing::parse(text, 2));
  std::vector<std::string> eager(2);
  run_threads(2, [&](Runtime& rt) {
    set_thread_device(Device::cuda(0));  // as cuda::bind_device() does
    Tensor x = Tensor::full({4}, DType::f32, double(rt.rank() + 1));
    for (double v : exec::interpret(*source, {x})[0].to_doubles()) EXPECT_EQ(v, rt.rank() + 1);
    exec::Executable exe(plan);
    for (double v : exe.run({x})[0].to_doubles()) EXPECT_EQ(v, rt.rank() + 1);
    EXPECT_EQ(thread_device(), Device::cuda(0));  // the guards restored it
    try {
      call("symm_mem::barrier", {"tp", int64_t(0)});
    } catch (const Error& e) {
      eager[size_t(rt.rank())] = e.what();
    }
    set_thread_device(Device::cpu());
  });
  for (const std::string& m : eager)
    EXPECT_NE(m.find("op 'symm_mem::barrier' has no cuda kernel"), std::string::npos) << m;
}

}  // namespace
}  // namespace symmflow
