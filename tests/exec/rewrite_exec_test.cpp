// Rewrites end to end, on 1, 2 and 4 ranks, in f32 and bf16: the compiled plan's outputs equal
// the eager interpreter's run of the graph as written (unfused) on every element, and the printed
// IR shows the rewrite.
//   - fuse_allreduce_rmsnorm: one_shot_all_reduce -> add -> rms_norm becomes
//     symm_mem::fused_all_reduce_add_rms_norm (examples/allreduce_rmsnorm.sf and a bf16 graph);
//   - decompose_collective_matmul: DTensor's sequence-parallel all-gather -> mms and mm ->
//     reduce-scatter become symm_mem::fused_all_gather_matmul / fused_matmul_reduce_scatter (at
//     2, 3 and 4 ranks, f32 and bf16, odd sizes);
//   - raise_gqa: repeat_kv's copies before attention become enable_gqa (grouped heads in place);
//   - raise_rotary: the rotary embedding's slices, neg, cat, products and sum become
//     fused::rotary_embedding (f32, bf16, f16, f64; bit for bit), and its bad arguments are refused;
//     its backward (two slice_scatters into zeros) becomes the op with a swapped, negated sin;
//   - the example plugin's pattern (examples/custom_op/myops.cpp): with the plugin loaded,
//     aten::add.Tensor + aten::gelu becomes myops::bias_gelu after the rewrite_patterns slot.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "support/graphs.hpp"
#include "support/scoped_tunables.hpp"
#include "symmflow/ir/text.hpp"
#include "support/tensors.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/interpret.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow {
namespace {

std::string example_text(const std::string& path) {
  std::ifstream in(std::string(SYMMFLOW_EXAMPLES_DIR) + "/" + path);
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

// A bf16 block whose residual comes first in the add, with a 3-d activation and odd sizes.
const char* kBf16Block = R"sf(group tp
graph block_bf16(x: bf16[2, 3, 17], w: bf16[17, 17], residual: bf16[2, 3, 17], weight: bf16[17]) {
  x2 = aten::view(x, [6, 17])
  h = aten::mm(x2, w)
  h3 = aten::view(h, [2, 3, 17])
  r = symm_mem::one_shot_all_reduce(h3, "avg", "tp")
  s = aten::add.Tensor(residual, r)
  out = aten::rms_norm(s, [17], weight, 0.001)
  return out, s
}
)sf";

// transformers' tp_plan: the all-reduce's tokens flattened and restored before the add.
const char* kTpPlanBlock = R"sf(group tp
graph block_tp_plan(x: f32[6, 17], w: f32[17, 17], residual: f32[2, 3, 17], weight: f32[17]) {
  h = aten::mm(x, w)
  h3 = aten::reshape(h, [2, 3, 17])
  r = symm_mem::one_shot_all_reduce(h3, "sum", "tp")
  v = aten::reshape(r, [6, 17])
  v3 = aten::reshape(v, [2, 3, 17])
  s = aten::add.Tensor(residual, v3)
  out = aten::rms_norm(s, [17], weight, 1e-06)
  return out, s
}
)sf";

struct Compiled {
  std::shared_ptr<const passes::Plan> plan;
  std::string after;  // the IR printed after pass `print_after`
};

Compiled compile_with_print(const std::string& text, int world, const std::string& print_after) {
  Compiled c;
  passes::CompileOptions options;
  options.after_pass = [&](const std::string& pass, const ir::Graph& g) {
    if (pass == print_after) c.after = ir::print_graph(g);
  };
  c.plan = passes::compile(ir::parse_graph(text, {"test.sf", world}), options);
  return c;
}

// Runs the plan on `world` ranks with two sets of inputs; every output equals the eager run of
// the source text, element for element.
void expect_plan_equals_eager(const Compiled& c, const std::string& text, int world) {
  std::shared_ptr<const ir::Graph> source = testing::parse(text, world);  // as written
  run_threads(world, [&](Runtime& rt) {
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

class FusedPattern : public ::testing::TestWithParam<int> {};

TEST_P(FusedPattern, RewritesAndMatchesTheUnfusedGraph) {
  const int w = GetParam();
  for (const std::string& text : {example_text("allreduce_rmsnorm.sf"), std::string(kBf16Block),
                                  std::string(kTpPlanBlock)}) {
    Compiled c = compile_with_print(text, w, "fuse_allreduce_rmsnorm");
    EXPECT_NE(c.after.find(" = symm_mem::fused_all_reduce_add_rms_norm("), std::string::npos)
        << c.after;
    EXPECT_EQ(c.after.find("aten::rms_norm"), std::string::npos) << c.after;
    EXPECT_EQ(c.after.find("one_shot_all_reduce"), std::string::npos) << c.after;
    expect_plan_equals_eager(c, text, w);
  }
}

INSTANTIATE_TEST_SUITE_P(Exec, FusedPattern, ::testing::Values(1, 2, 4));

class CollectiveMatmul : public ::testing::TestWithParam<int> {};

TEST_P(CollectiveMatmul, DecomposesAndMatchesTheGraphAsWritten) {
  const int w = GetParam();
  testing::ScopedTunables every_size(testing::decompose_every_size());
  for (const char* dtype : {"f32", "bf16"}) {
    const std::string text = testing::sequence_parallel_text(w, dtype);
    Compiled c = compile_with_print(text, w, "decompose_collective_matmul");
    EXPECT_NE(c.after.find("cat, q_nd, k_nd = symm_mem::fused_all_gather_matmul(x, [pq, pk], 1, "
                           "\"tp\")"),
              std::string::npos)
        << c.after;
    EXPECT_NE(c.after.find("functional<symm_mem::fused_matmul_reduce_scatter>(partials, h_nd, "
                           "wo, \"sum\", 1, \"tp\")"),
              std::string::npos)
        << c.after;
    for (const char* gone : {"_low_contention", "aten::mm", "aten::cat", "split_with_sizes"})
      EXPECT_EQ(c.after.find(gone), std::string::npos) << gone << " in\n" << c.after;
    expect_plan_equals_eager(c, text, w);
  }
}

INSTANTIATE_TEST_SUITE_P(Exec, CollectiveMatmul, ::testing::Values(2, 3, 4));

// Bad arguments of the collective matmuls are refused when the node is built, naming the op and
// the argument (their shape functions).
TEST(CollectiveMatmulArgs, BadArgumentsAreRefusedWithTheirReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"o = symm_mem::fused_all_gather_matmul(x, [w], 1, \"tp\")",
       "symm_mem::fused_all_gather_matmul: gather_dim 1 of A (f32[4, 8]) must be one of its "
       "leading dims, 0 to 0 (the last dim is contracted by the matmul)"},
      {"o = symm_mem::fused_all_gather_matmul(x, [x], 0, \"tp\")",
       "symm_mem::fused_all_gather_matmul: argument 'Bs[0]' is f32[4, 8] but must be f32[8, N] "
       "(A's dtype, A's last dim by N)"},
      {"o = symm_mem::fused_matmul_reduce_scatter(p, x, w, \"max\", 0, \"tp\")",
       "symm_mem::fused_matmul_reduce_scatter: reduce_op 'max' is not supported (sum or avg: the "
       "partial products add up)"},
      {"o = symm_mem::fused_matmul_reduce_scatter(x, x, w, \"sum\", 0, \"tp\")",
       "symm_mem::fused_matmul_reduce_scatter: argument 'partials' is f32[4, 8] but must be "
       "f32[2, 2, 3] (one slot per rank of the result)"},
      {"o = symm_mem::fused_matmul_reduce_scatter(p, i, wi, \"sum\", 0, \"tp\")",
       "symm_mem::fused_matmul_reduce_scatter: argument 'A' is i64[4, 8]; the matmul takes floats"},
  };
  for (const auto& [line, want] : cases) {
    const std::string text = std::string("group tp\ngraph g(x: f32[4, 8], w: f32[8, 3], ") +
                             "p: f32[2, 2, 3], i: i64[4, 8], wi: i64[8, 3]) {\n  " + line +
                             "\n  return o\n}\n";
    try {
      testing::parse(text, 2);
      ADD_FAILURE() << "accepted: " << line;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(CollectiveMatmulSize, SmallerChainsStayAsTheyAre) {  // Note [when to decompose]
  Compiled c = compile_with_print(testing::sequence_parallel_text(2, "f32"), 2,
                                  "decompose_collective_matmul");
  EXPECT_EQ(c.after.find("fused_"), std::string::npos) << c.after;
  EXPECT_NE(c.after.find("_low_contention_all_gather"), std::string::npos) << c.after;
}

// raise_rotary (Note [rotary from its decomposition]): q and k of a decoder layer, permuted
// projections with cos and sin broadcast over the heads, in every float dtype and an awkward
// head dim (10: halves of 5); the compiled plan equals the chain run op by op, bit for bit.
std::string rotary_text(const char* dt) {
  return fmt::format(R"sf(graph rope(q: {0}[7, 3, 10], k: {0}[7, 2, 10], cos: {0}[7, 10], sin: {0}[7, 10]) {{
  x = aten::permute(q, [1, 0, 2])
  y = aten::permute(k, [1, 0, 2])
  x1 = aten::slice.Tensor(x, 2, 0, 5)
  x2 = aten::slice.Tensor(x, 2, 5, 9223372036854775807)
  a = aten::mul.Tensor(x, cos)
  n = aten::neg(x2)
  r = aten::cat([n, x1], -1)
  b = aten::mul.Tensor(r, sin)
  qr = aten::add.Tensor(a, b)
  y1 = aten::slice.Tensor(y, -1, 0, 5)
  y2 = aten::slice.Tensor(y, -1, 5, 10)
  c = aten::mul.Tensor(cos, y)
  m = aten::neg(y2)
  t = aten::cat([m, y1], 2)
  d = aten::mul.Tensor(sin, t)
  kr = aten::add.Tensor(d, c)
  return qr, kr
}}
)sf", dt);
}

TEST(Rotary, RaisesAndMatchesTheChainBitForBit) {
  for (const char* dt : {"f32", "bf16", "f16", "f64"}) {
    const std::string text = rotary_text(dt);
    Compiled c = compile_with_print(text, 1, "raise_rotary");
    EXPECT_NE(c.after.find("qr = fused::rotary_embedding(x, cos, sin)"), std::string::npos)
        << c.after;
    EXPECT_NE(c.after.find("kr = fused::rotary_embedding(y, cos, sin)"), std::string::npos)
        << c.after;
    for (const char* gone : {"aten::cat", "aten::neg", "aten::slice", "aten::mul"})
      EXPECT_EQ(c.after.find(gone), std::string::npos) << gone << " in\n" << c.after;
    expect_plan_equals_eager(c, text, 1);
  }
}

// raise_rotary's backward (Note [rotary backward]): AOT autograd's gradient of the rotary
// embedding, g * cos plus rotate_half's transpose of g * sin as two slice_scatters into zeros,
// with sin's halves unequal (random tables) and broadcast over the heads ([B, 1, S, D]) or not,
// an awkward head dim (10); the fused op with the swapped, negated sin equals the chain bit for
// bit, and the zeros' fill is gone.
std::string rotary_backward_text(const char* dt) {
  return fmt::format(R"sf(graph rope_backward(g: {0}[2, 3, 7, 10], cos: {0}[2, 1, 7, 10], sin: {0}[2, 1, 7, 10], h: {0}[2, 3, 7, 10], c2: {0}[7, 10], s2: {0}[7, 10]) {{
  z = aten::full([2, 3, 7, 10], 0, dtype={0})
  y = aten::mul.Tensor(g, sin)
  y1 = aten::slice.Tensor(y, 3, 0, 5)
  y2 = aten::slice.Tensor(y, 3, 5, 9223372036854775807)
  n = aten::neg(y1)
  s1 = aten::slice_scatter(z, n, 3, 5, 9223372036854775807)
  s0 = aten::slice_scatter(z, y2, 3, 0, 5)
  t = aten::add.Tensor(s1, s0)
  c = aten::mul.Tensor(g, cos)
  dg = aten::add.Tensor(t, c)
  w = aten::mul.Tensor(s2, h)
  w1 = aten::slice.Tensor(w, -1, 0, 5)
  w2 = aten::slice.Tensor(w, -1, 5, 10)
  m = aten::neg(w1)
  u1 = aten::slice_scatter(z, m, -1, 5, 10)
  u0 = aten::slice_scatter(z, w2, -1, 0, 5)
  v = aten::add.Tensor(u0, u1)
  e = aten::mul.Tensor(c2, h)
  dh = aten::add.Tensor(e, v)
  return dg, dh
}}
)sf", dt);
}

TEST(Rotary, BackwardRaisesAndMatchesTheChainBitForBit) {
  for (const char* dt : {"f32", "bf16", "f16", "f64"}) {
    const std::string text = rotary_backward_text(dt);
    Compiled c = compile_with_print(text, 1, "raise_rotary");
    EXPECT_NE(c.after.find("dg = fused::rotary_embedding(g, cos, "), std::string::npos) << c.after;
    EXPECT_NE(c.after.find("dh = fused::rotary_embedding(h, c2, "), std::string::npos) << c.after;
    for (const char* gone : {"aten::slice_scatter", "aten::full", "aten::mul", "aten::add"})
      EXPECT_EQ(c.after.find(gone), std::string::npos) << gone << " in\n" << c.after;
    expect_plan_equals_eager(c, text, 1);
  }
}

// Note [one swapped sin]: two chains that read the same sin (a layer's q and k) share one cat and
// one neg; chains of different sins (the test above) each have their own.
TEST(Rotary, BackwardChainsOfOneSinShareOneSwappedSin) {
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  for (const char* dt : {"f32", "bf16"}) {
    std::string text = rotary_backward_text(dt);
    text.replace(text.find("w = aten::mul.Tensor(s2, h)"), 27, "w = aten::mul.Tensor(sin, h)");
    Compiled c = compile_with_print(text, 1, "raise_rotary");
    EXPECT_EQ(count(c.after, "fused::rotary_embedding("), 2u) << c.after;
    EXPECT_EQ(count(c.after, "aten::cat("), 1u) << c.after;
    EXPECT_EQ(count(c.after, "aten::neg("), 1u) << c.after;
    expect_plan_equals_eager(c, text, 1);
  }
  Compiled apart = compile_with_print(rotary_backward_text("f32"), 1, "raise_rotary");
  EXPECT_EQ(count(apart.after, "aten::cat("), 2u) << apart.after;
}

// A scatter into a base that is not zeros, or a neg of the wrong half, is not the backward.
TEST(Rotary, BackwardNotRaisedWithoutZerosOrWithTheWrongHalf) {
  std::string ones = rotary_backward_text("f32");
  ones.replace(ones.find("[2, 3, 7, 10], 0, "), 18, "[2, 3, 7, 10], 1, ");
  Compiled c = compile_with_print(ones, 1, "raise_rotary");
  EXPECT_EQ(c.after.find("fused::rotary_embedding"), std::string::npos) << c.after;
  expect_plan_equals_eager(c, ones, 1);
  std::string wrong = rotary_backward_text("f32");
  wrong.replace(wrong.find("n = aten::neg(y1)"), 17, "n = aten::neg(y2)");
  wrong.replace(wrong.find("s0 = aten::slice_scatter(z, y2"), 30, "s0 = aten::slice_scatter(z, y1");
  Compiled w = compile_with_print(wrong, 1, "raise_rotary");
  EXPECT_EQ(w.after.find("dg = fused::rotary_embedding"), std::string::npos) << w.after;
  EXPECT_NE(w.after.find("dh = fused::rotary_embedding"), std::string::npos) << w.after;
  expect_plan_equals_eager(w, wrong, 1);
}

// raise_gqa (Note [attention reads grouped heads in place]): repeat_kv's unsqueeze, expand, clone
// and reshape before attention, 6 query heads over 2 key/value heads (R = 3), an awkward head dim
// and lengths, with an additive mask and causal; the plan reads the unrepeated key and value and
// equals the graph as written, bit for bit, in every float dtype.
std::string gqa_text(const char* dt, const char* attention_args) {
  return fmt::format(R"sf(graph attend(q: {0}[2, 6, 3, 12], kc: {0}[2, 2, 5, 12], vc: {0}[2, 2, 5, 12], mask: {0}[2, 1, 3, 5]) {{
  uk = aten::unsqueeze(kc, 2)
  ek = aten::expand(uk, [2, 2, 3, 5, 12])
  ck = aten::clone(ek)
  k = aten::reshape(ck, [2, 6, 5, 12])
  uv = aten::unsqueeze(vc, 2)
  ev = aten::expand(uv, [2, 2, 3, 5, 12])
  cv = aten::clone(ev)
  v = aten::reshape(cv, [2, 6, 5, 12])
  o = aten::scaled_dot_product_attention(q, k, v{1})
  return o
}}
)sf", dt, attention_args);
}

TEST(Gqa, RaisesAndMatchesTheRepeatedHeadsBitForBit) {
  for (const char* dt : {"f32", "bf16", "f16"}) {
    for (const char* args : {", mask", ", mask, scale=0.5", ", is_causal=True"}) {
      const std::string text = gqa_text(dt, args);
      Compiled c = compile_with_print(text, 1, "raise_gqa");
      EXPECT_NE(c.after.find("aten::scaled_dot_product_attention(q, kc, vc"), std::string::npos)
          << c.after;
      EXPECT_NE(c.after.find("enable_gqa=True)"), std::string::npos) << c.after;
      for (const char* gone : {"aten::expand", "aten::clone", "aten::unsqueeze"})
        EXPECT_EQ(c.after.find(gone), std::string::npos) << gone << " in\n" << c.after;
      expect_plan_equals_eager(c, text, 1);
    }
  }
}

// Bad arguments of fused::rotary_embedding are refused when the node is built, naming them.
TEST(Rotary, BadArgumentsAreRefusedWithTheirReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"o = fused::rotary_embedding(odd, odd, odd)",
       "fused::rotary_embedding: argument 'x' is f32[4, 7]; its last dim (the head dim) must be "
       "even"},
      {"o = fused::rotary_embedding(x, h, x)",
       "fused::rotary_embedding: argument 'cos' is bf16[4, 8] but must have x's dtype (f32)"},
      {"o = fused::rotary_embedding(x, x, w)",
       "fused::rotary_embedding: argument 'sin' is f32[3, 8], which does not broadcast to x's "
       "shape [4, 8]"},
      {"o = fused::rotary_embedding(i, i, i)",
       "fused::rotary_embedding: argument 'x' is i64[4, 8]; rotary embedding takes floats"},
  };
  for (const auto& [line, want] : cases) {
    const std::string text = std::string("graph g(x: f32[4, 8], odd: f32[4, 7], h: bf16[4, 8], ") +
                             "w: f32[3, 8], i: i64[4, 8]) {\n  " + line + "\n  return o\n}\n";
    try {
      testing::parse(text, 1);
      ADD_FAILURE() << "accepted: " << line;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

class PluginPattern : public ::testing::TestWithParam<int> {};

TEST_P(PluginPattern, RewritesAndMatchesTheUnfusedGraph) {
  load_plugin(std::string(SYMMFLOW_BIN_DIR) + "/lib/libmyops.so");
  const int w = GetParam();
  for (const std::string& text : {example_text("custom_op/bias_gelu.sf"), std::string(kBf16)}) {
    Compiled c = compile_with_print(text, w, "rewrite_patterns");
    EXPECT_NE(c.after.find("g = myops::bias_gelu("), std::string::npos) << c.after;
    EXPECT_EQ(c.after.find("aten::gelu"), std::string::npos) << c.after;
    EXPECT_EQ(c.after.find("aten::add"), std::string::npos) << c.after;
    expect_plan_equals_eager(c, text, w);
  }
}

INSTANTIATE_TEST_SUITE_P(Exec, PluginPattern, ::testing::Values(1, 2, 4));

}  // namespace
}  // namespace symmflow
