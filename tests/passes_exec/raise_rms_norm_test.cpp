// Execution tests of raise_rms_norm (Note [rms_norm from its decompositions]): each decomposed
// RMSNorm form that PyTorch emits, run op by op, against the same graph after the pass (one
// aten::rms_norm), on every element. f32 forms differ only by the order of the sum of squares; the
// bf16 form with torch's upcast computes exactly what rms_norm does (one rounding), transformers'
// form rounds once more before the weight product (at most one bf16 unit apart), and a chain
// without upcast rounds after every op.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "passes_exec/interpreter.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/ir/verify.hpp"
#include "symmflow/passes/passes.hpp"
#include "symmflow/passes/pipeline.hpp"

namespace symmflow {
namespace {

struct Form {
  std::string name;
  std::string dtype;     // of x and w
  std::string upcast;    // "" or the f32 cast of x
  std::string tail;      // from m (x * rsqrt) to `out`
  size_t nodes_after;    // 1: the norm alone
  double rel_tolerance;  // of the largest |out|, per element
};

DType dtype_of(const Form& f) { return f.dtype == "f32" ? DType::f32 : DType::bf16; }

std::string graph_text(const Form& f) {
  const std::string u = f.upcast.empty() ? "x" : "u";
  return "graph g(x: " + f.dtype + "[6, 80], w: " + f.dtype + "[80]) {\n" + f.upcast +
         "  p = aten::pow.Tensor_Scalar(" + u + ", 2)\n"
         "  v = aten::mean.dim(p, [-1], True)\n"
         "  e = aten::add.Scalar(v, 1e-05)\n"
         "  q = aten::rsqrt(e)\n"
         "  m = aten::mul.Tensor(" + u + ", q)\n" + f.tail + "  return out\n}\n";
}

double to_double_at(const Tensor& t, int64_t i) {
  Tensor f = call("aten::_to_copy", {t}, {{"dtype", DType::f64}}).to_tensor().contiguous();
  return f.data<double>()[i];
}

TEST(RaiseRmsNorm, EveryFormEqualsItsChainOpByOp) {
  const std::string up = "  u = aten::_to_copy(x, dtype=f32)\n";
  const std::vector<Form> forms = {
      {"f32, weight last", "f32", "", "  out = aten::mul.Tensor(m, w)\n", 1, 1e-6},
      {"f32, no weight (m used twice)", "f32", "", "  out = aten::mul.Tensor(m, m)\n", 2, 1e-6},
      {"torch's bf16 form", "bf16", up,
       "  n = aten::mul.Tensor(m, w)\n  out = aten::_to_copy(n, dtype=bf16)\n", 1, 1.0 / 128},
      {"transformers' bf16 form", "bf16", up,
       "  c = aten::_to_copy(m, dtype=bf16)\n  out = aten::mul.Tensor(w, c)\n", 1, 2.0 / 128},
      {"bf16 without upcast", "bf16", "", "  out = aten::mul.Tensor(w, m)\n", 1, 4.0 / 128},
  };
  for (const Form& f : forms) {
    SCOPED_TRACE(f.name);
    auto g = ir::parse_graph(graph_text(f));
    std::vector<Tensor> in = {testing::random_tensor({6, 80}, dtype_of(f), 11),
                              testing::random_tensor({80}, dtype_of(f), 12, 0.5, 1.5)};
    std::vector<Tensor> eager_in = in;
    Tensor want = testing::interpret(*g, eager_in).at(0);
    passes::raise_rms_norm(*g);
    ASSERT_TRUE(ir::verify_graph(*g).empty()) << ir::print_graph(*g);
    int norms = 0;
    for (const ir::Node* n : g->nodes()) norms += n->op() && n->op()->name() == "aten::rms_norm";
    ASSERT_EQ(g->nodes().size(), f.nodes_after) << ir::print_graph(*g);
    EXPECT_EQ(norms, 1);
    Tensor got = testing::interpret(*g, in).at(0);
    ASSERT_EQ(got.dtype(), want.dtype());
    ASSERT_EQ(got.shape(), want.shape());
    double largest = 0;
    for (int64_t i = 0; i < want.numel(); ++i)
      largest = std::max(largest, std::abs(to_double_at(want, i)));
    for (int64_t i = 0; i < want.numel(); ++i) {
      double a = to_double_at(got, i), b = to_double_at(want, i);
      ASSERT_LE(std::abs(a - b), f.rel_tolerance * largest + 1e-6 * std::abs(b))
          << "element " << i << ": " << a << " vs " << b;
    }
  }
}

// Note [skipping fusions]: the pipeline runs the pass by default, skips it when asked, and refuses
// to skip a pass the plan needs.
TEST(RaiseRmsNorm, SkippedOnlyWhenAskedAndOnlyIfOptional) {
  const Form f{"torch's bf16 form", "bf16", "  u = aten::_to_copy(x, dtype=f32)\n",
               "  n = aten::mul.Tensor(m, w)\n  out = aten::_to_copy(n, dtype=bf16)\n", 1, 0};
  auto norms_after_compile = [&](std::vector<std::string> skip) {
    passes::CompileOptions options;
    options.skip_passes = std::move(skip);
    int norms = -1;
    options.after_pass = [&](const std::string& pass, const ir::Graph& g) {
      if (pass != "reinplace") return;
      norms = 0;
      for (const ir::Node* n : g.nodes()) norms += n->op() && n->op()->name() == "aten::rms_norm";
    };
    passes::compile(ir::parse_graph(graph_text(f)), options);
    return norms;
  };
  EXPECT_EQ(norms_after_compile({}), 1);
  EXPECT_EQ(norms_after_compile({"raise_rms_norm"}), 0);
  try {
    norms_after_compile({"schedule"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "pass 'schedule' cannot be skipped (SYMMFLOW_SKIP_PASSES / skip_passes take: "
              "raise_rms_norm, raise_rotary, raise_gqa, fuse_allreduce_rmsnorm, "
              "decompose_collective_matmul, fuse_pointwise)");
  }
}

}  // namespace
}  // namespace symmflow
