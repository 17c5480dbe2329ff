// The example plugin's rewrite pattern end to end (examples/custom_op/myops.cpp): with the plugin
// loaded, compiling a graph written with aten::add.Tensor + aten::gelu shows myops::bias_gelu in
// the IR printed after the rewrite_patterns slot, and the compiled plan's outputs equal the eager
// interpreter's run of the unfused graph on every element, on 1, 2 and 4 ranks, in f32 and bf16.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "exec_util.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/interpret.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow {
namespace {

std::string example_text() {
  std::ifstream in(std::string(SYMMFLOW_EXAMPLES_DIR) + "/custom_op/bias_gelu.sf");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A bf16 graph with a 3-d activation and the bias added first (add(bias, x)).
const char* kBf16 = R"sf(graph bias_gelu_bf16(x: bf16[2, 3, 33], b: bf16[33], z: bf16[2, 3, 33]) {
  a = aten::add.Tensor(b, x)
  g = aten::gelu(a)
  y = aten::mul.Tensor(g, z)
  return y
}
)sf";

struct Compiled {
  std::shared_ptr<const passes::Plan> plan;
  std::string after_rewrite;  // the IR printed after rewrite_patterns
};

Compiled compile_with_print(const std::string& text, int world) {
  Compiled c;
  passes::CompileOptions options;
  options.after_pass = [&](const std::string& pass, const ir::Graph& g) {
    if (pass == "rewrite_patterns") c.after_rewrite = ir::print_graph(g);
  };
  c.plan = passes::compile(ir::parse_graph(text, {"test.sf", world}), options);
  return c;
}

class PluginPattern : public ::testing::TestWithParam<int> {};

TEST_P(PluginPattern, RewritesAndMatchesTheUnfusedGraph) {
  load_plugin(std::string(SYMMFLOW_BIN_DIR) + "/lib/libmyops.so");
  const int w = GetParam();
  for (const std::string& text : {example_text(), std::string(kBf16)}) {
    Compiled c = compile_with_print(text, w);
    EXPECT_NE(c.after_rewrite.find("g = myops::bias_gelu("), std::string::npos) << c.after_rewrite;
    EXPECT_EQ(c.after_rewrite.find("aten::gelu"), std::string::npos) << c.after_rewrite;
    EXPECT_EQ(c.after_rewrite.find("aten::add"), std::string::npos) << c.after_rewrite;
    std::shared_ptr<const ir::Graph> source = testing::parse(text, w);  // unfused, as written
    run_threads(w, [&](Runtime& rt) {
      exec::Executable exe(c.plan);
      for (int seed = 0; seed < 2; ++seed) {
        std::vector<Tensor> in;
        for (const ir::Value* v : source->inputs())
          in.push_back(testing::make_input(v->type().shape, v->type().dtype, rt.rank(), seed));
        std::vector<Tensor> got = exe.run(in);
        std::vector<Tensor> want = exec::interpret(*source, in);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i)
          testing::expect_same(got[i], want[i], source->name() + " output " + std::to_string(i));
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Exec, PluginPattern, ::testing::Values(1, 2, 4));

}  // namespace
}  // namespace symmflow
