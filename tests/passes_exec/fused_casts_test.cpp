// Execution tests of fuse_pointwise's casts and broadcasts (Note [fused casts and broadcasts]):
// each graph runs op by op through the registry (the test interpreter), then after fuse_pointwise
// (its fused nodes through exec::run_fused), and every output must be bitwise equal. Regions mix
// dtypes (bf16 <-> f32 <-> f16 casts) and read inputs broadcast along leading, middle and
// trailing dims, over awkward sizes so chunks start mid-row; run_fused is also called directly
// with chunk sizes from 1 element up, on broadcast and on strided inputs.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include <fmt/format.h>

#include "passes_exec/interpreter.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/ir/verify.hpp"
#include "symmflow/passes/passes.hpp"

namespace symmflow {
namespace {

using testing::bitwise_equal;
using testing::interpret;

Tensor random_tensor(const Shape& shape, DType dtype, std::mt19937& rng) {
  std::uniform_real_distribution<double> d(-3.0, 3.0);
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) store_double(t.view(), i, d(rng));
  return t;
}

std::vector<Tensor> random_inputs(const ir::Graph& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Tensor> in;
  for (const ir::Value* v : g.inputs()) in.push_back(random_tensor(v->type().shape, v->type().dtype, rng));
  return in;
}

// The graph `text` (DT replaced by `dt`), run op by op and after fuse_pointwise: bitwise equal.
// Returns the fused graph; `fused_ops` is the number of ops each fused node must hold (in order).
std::unique_ptr<ir::Graph> check_fused_equals_op_by_op(std::string text, const char* dt,
                                                       const std::vector<size_t>& fused_ops) {
  for (size_t at; (at = text.find("DT")) != std::string::npos;) text.replace(at, 2, dt);
  auto g = ir::parse_graph(text);
  std::vector<Tensor> in = random_inputs(*g, 17);
  std::vector<Tensor> want = interpret(*g, in);
  passes::fuse_pointwise(*g);
  SCOPED_TRACE(std::string(dt) + ":\n" + ir::print_graph(*g));
  EXPECT_TRUE(ir::verify_graph(*g).empty()) << ir::format_diagnostics(ir::verify_graph(*g), "", "");
  std::vector<size_t> got_ops;
  for (const ir::Node* n : g->nodes()) {
    if (n->kind() == ir::NodeKind::fused) got_ops.push_back(n->body()->nodes().size());
  }
  EXPECT_EQ(got_ops, fused_ops);
  std::vector<Tensor> got = interpret(*g, in);
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    EXPECT_TRUE(bitwise_equal(got[i], want[i])) << "output " << i;
  return g;
}

// The SwiGLU tail as torch writes it for bf16 (silu in f32 between casts, as aten::silu and as
// sigmoid and mul sharing the cast's value), and a chain through f16, f32 and bf16: one region
// each, every value rounded to its own dtype as op by op.
TEST(FusedCasts, CastChainsEqualOpByOp) {
  const char* swiglu = R"(graph f(g: DT[7, 13], u: DT[7, 13]) {
  a = aten::_to_copy(g, dtype=f32)
  s = aten::silu(a)
  b = aten::_to_copy(s, dtype=DT)
  c = aten::mul.Tensor(b, u)
  return c
}
)";
  const char* through = R"(graph f(x: DT[7, 13], y: DT[7, 13]) {
  a = aten::_to_copy(x, dtype=f16)
  b = aten::mul.Scalar(a, 1.1)
  c = aten::_to_copy(b, dtype=f32)
  d = aten::exp(c)
  e = aten::_to_copy(d, dtype=DT)
  f = aten::sub.Tensor(e, y, alpha=0.5)
  g = aten::_to_copy(f, dtype=bf16)
  return g
}
)";
  // torch's decomposition of silu: the cast's value is used twice inside the region.
  const char* torch_swiglu = R"(graph f(g: DT[7, 13], u: DT[7, 13]) {
  a = aten::_to_copy(g, dtype=f32)
  s = aten::sigmoid(a)
  m = aten::mul.Tensor(a, s)
  b = aten::_to_copy(m, dtype=DT)
  c = aten::mul.Tensor(b, u)
  return c
}
)";
  for (const char* dt : {"f32", "bf16"}) {
    check_fused_equals_op_by_op(swiglu, dt, {4});
    check_fused_equals_op_by_op(torch_swiglu, dt, {5});
    check_fused_equals_op_by_op(through, dt, {7});
  }
}

// The backward chains of RMSNorm (x ** 1.0 * 2, r ** 3) and SiLU (1 - sigmoid) fuse with their
// pow.Tensor_Scalar and rsub.Scalar, bitwise equal to op by op; an integer chain stays op by op.
TEST(FusedCasts, PowAndRsubJoinRegionsIntegersDoNot) {
  const char* rms_backward = R"(graph f(x: DT[5, 33], r: DT[5, 1], g: DT[5, 33]) {
  a = aten::pow.Tensor_Scalar(x, 1.0)
  b = aten::mul.Scalar(a, 2.0)
  c = aten::pow.Tensor_Scalar(r, 3)
  d = aten::mul.Tensor(b, c)
  e = aten::mul.Tensor(g, r)
  f = aten::add.Tensor(e, d)
  return f
}
)";
  const char* silu_backward = R"(graph f(x: DT[5, 33], g: DT[5, 33]) {
  s = aten::sigmoid(x)
  o = aten::rsub.Scalar(s, 1)
  m = aten::mul.Tensor(x, o)
  a = aten::add.Scalar(m, 1)
  b = aten::mul.Tensor(s, a)
  c = aten::mul.Tensor(g, b)
  h = aten::pow.Tensor_Scalar(c, 0.5)
  return h
}
)";
  for (const char* dt : {"f32", "bf16", "f64"}) {
    check_fused_equals_op_by_op(rms_backward, dt, {5});  // c is [5, 1]: it stays a node
    check_fused_equals_op_by_op(silu_backward, dt, {7});
  }
  const char* integers = R"(graph f(i: i64[7], j: i64[7]) {
  a = aten::add.Tensor(i, j)
  b = aten::rsub.Scalar(a, 3)
  c = aten::mul.Tensor(b, j)
  return c
}
)";
  check_fused_equals_op_by_op(integers, "f32", {});
}

// Rotary's x * cos + r * sin with cos over the leading (heads) dim, sin over a middle dim, a
// one-element and a per-row (trailing size-1) input; 3 x 7 x 13 and a size that spans chunks
// (5 x 1001 x 9 = 45045 elements: chunks of 16384 start mid-row).
TEST(FusedCasts, BroadcastInputsEqualOpByOp) {
  const char* rotary = R"(graph f(x: DT[3, R, C], r: DT[3, R, C], cos: DT[R, C], sin: DT[3, 1, C], k: DT[1], row: DT[R, 1]) {
  a = aten::mul.Tensor(x, cos)
  b = aten::mul.Tensor(r, sin)
  c = aten::add.Tensor(a, b)
  d = aten::sub.Tensor(c, k)
  e = aten::mul.Tensor(row, d)
  return e
}
)";
  const char* cast_broadcast = R"(graph f(x: DT[3, R, C], w: f32[C]) {
  a = aten::_to_copy(x, dtype=f32)
  b = aten::mul.Tensor(a, w)
  c = aten::_to_copy(b, dtype=DT)
  return c
}
)";
  for (const char* dt : {"f32", "bf16"}) {
    for (auto shape : {std::pair{7, 13}, std::pair{1001, 9}}) {
      const int rows = shape.first, cols = shape.second;  // clang 14 captures no structured binding
      auto sized = [&](std::string t) {
        for (size_t at; (at = t.find("R, ")) != std::string::npos;) t.replace(at, 3, std::to_string(rows) + ", ");
        for (size_t at; (at = t.find(", C]")) != std::string::npos;) t.replace(at, 4, ", " + std::to_string(cols) + "]");
        for (size_t at; (at = t.find("[C]")) != std::string::npos;) t.replace(at, 3, "[" + std::to_string(cols) + "]");
        return t;
      };
      check_fused_equals_op_by_op(sized(rotary), dt, {5});
      check_fused_equals_op_by_op(sized(cast_broadcast), dt, {3});
    }
  }
}

// run_fused directly over every chunk size: the gather of a broadcast input restarts at any
// offset (mid-row, mid-plane) and agrees with the ops run on whole tensors.
TEST(FusedCasts, BroadcastGatherAtEveryChunkSize) {
  auto g = ir::parse_graph(R"(graph f(x: f32[4, 5, 6], m: f32[4, 1, 6], l: f32[5, 1], h: bf16[6]) {
  r = fused(x, m, l, h) {
    a = aten::mul.Tensor(x, m)
    b = aten::add.Tensor(a, l)
    c = aten::_to_copy(b, dtype=bf16)
    d = aten::mul.Tensor(c, h)
    return d
  }
  return r
}
)");
  const ir::Graph& body = *g->nodes()[0]->body();
  std::vector<Tensor> in = random_inputs(*g, 5);
  Tensor a = call("aten::mul.Tensor", {in[0], in[1]}).to_tensor();
  Tensor b = call("aten::add.Tensor", {a, in[2]}).to_tensor();
  Tensor c = call("aten::_to_copy", {b}, {{"dtype", DType::bf16}}).to_tensor();
  Tensor want = call("aten::mul.Tensor", {c, in[3]}).to_tensor();
  for (int64_t chunk : {int64_t(1), int64_t(4), int64_t(7), int64_t(30), int64_t(119), int64_t(4096)}) {
    Tensor out = Tensor::empty({4, 5, 6}, DType::bf16);
    Tensor outs[] = {out};
    exec::run_fused(body, in, outs, chunk);
    EXPECT_TRUE(bitwise_equal(out, want)) << "chunk " << chunk;
  }
}

// The gather fills a broadcast run with one value and copies a strided run by element size
// (Note [gathered runs]): f64 and f16 inputs broadcast along the last dim ([4, 1]) and read at
// stride 3, the same bits as the ops on the views at every chunk size.
TEST(FusedCasts, GathersRunsOfEveryElementSize) {
  for (const char* dt : {"f64", "f16"}) {
    auto g = ir::parse_graph(fmt::format(R"(graph f(x: {0}[4, 6], l: {0}[4, 1], s: {0}[4, 6]) {{
  r = fused(x, l, s) {{
    a = aten::mul.Tensor(x, l)
    b = aten::add.Tensor(a, s)
    return b
  }}
  return r
}}
)", dt));
    const ir::Graph& body = *g->nodes()[0]->body();
    const DType dtype = body.inputs()[0]->type().dtype;
    std::mt19937 rng(11);
    Tensor x = random_tensor({4, 6}, dtype, rng), l = random_tensor({4, 1}, dtype, rng);
    Tensor s = random_tensor({4, 18}, dtype, rng).as_strided({4, 6}, {18, 3}, 2);
    Tensor want = call("aten::add.Tensor", {call("aten::mul.Tensor", {x, l}), s}).to_tensor();
    for (int64_t chunk : {int64_t(1), int64_t(5), int64_t(7), int64_t(4096)}) {
      Tensor out = Tensor::empty({4, 6}, dtype);
      Tensor ins[] = {x, l, s};
      Tensor outs[] = {out};
      exec::run_fused(body, ins, outs, chunk);
      EXPECT_TRUE(bitwise_equal(out, want)) << dt << " chunk " << chunk;
    }
  }
}

// Strided inputs (a transpose, a step slice, a stride-0 expand) are read by their strides, as
// plans pass views to a region: the same bits as the ops on the views, at every chunk size.
TEST(FusedCasts, StridedInputsAreReadByTheirStrides) {
  auto g = ir::parse_graph(R"(graph f(xt: f32[6, 5], ys: bf16[6, 5], e: f32[6, 5]) {
  r = fused(xt, ys, e) {
    a = aten::_to_copy(ys, dtype=f32)
    b = aten::mul.Tensor(xt, a)
    c = aten::add.Tensor(b, e)
    return c
  }
  return r
}
)");
  const ir::Graph& body = *g->nodes()[0]->body();
  std::mt19937 rng(9);
  Tensor x = random_tensor({5, 6}, DType::f32, rng);
  Tensor y = random_tensor({6, 10}, DType::bf16, rng);
  Tensor row = random_tensor({5}, DType::f32, rng);
  Tensor xt = x.as_strided({6, 5}, {1, 6}, 0);   // aten::t
  Tensor ys = y.as_strided({6, 5}, {10, 2}, 1);  // y[:, 1::2]
  Tensor e = row.as_strided({6, 5}, {0, 1}, 0);  // row expanded over 6 rows
  Tensor a = call("aten::_to_copy", {ys}, {{"dtype", DType::f32}}).to_tensor();
  Tensor want = call("aten::add.Tensor", {call("aten::mul.Tensor", {xt, a}), e}).to_tensor();
  for (int64_t chunk : {int64_t(1), int64_t(4), int64_t(7), int64_t(4096)}) {
    Tensor out = Tensor::empty({6, 5}, DType::f32);
    Tensor ins[] = {xt, ys, e};
    Tensor outs[] = {out};
    exec::run_fused(body, ins, outs, chunk);
    EXPECT_TRUE(bitwise_equal(out, want)) << "chunk " << chunk;
  }
}

// Note [fused programs prepared once]: a FusedProgram prepares at its first run and reruns from
// that preparation while each input keeps its layout (flat, or gathered by strides: new addresses
// and strides are bound), prepares again when one changes, and equals run_fused every time; it
// keeps none of a run's tensors alive after it, an error included; a second output of the same
// value (an identity copy) is bound each run too.
TEST(FusedProgram, PreparesOnceWhileTheLayoutStays) {
  auto g = ir::parse_graph(R"(graph f(x: f32[6, 5], s: bf16[6, 5], e: f32[5]) {
  r, q = fused(x, s, e) {
    a = aten::_to_copy(s, dtype=f32)
    b = aten::mul.Tensor(x, a)
    c = aten::add.Tensor(b, e)
    return c, c
  }
  return r, q
}
)");
  const ir::Graph& body = *g->nodes()[0]->body();
  exec::FusedProgram program(body, 7);
  std::mt19937 rng(5);
  auto run_both = [&](const Tensor& x, const Tensor& s, const Tensor& e, bool reuse,
                      const char* what) {
    SCOPED_TRACE(what);
    Tensor want = Tensor::empty({6, 5}, DType::f32), want2 = Tensor::empty({6, 5}, DType::f32);
    Tensor got = Tensor::empty({6, 5}, DType::f32), got2 = Tensor::empty({6, 5}, DType::f32);
    Tensor ins[] = {x, s, e};
    Tensor wants[] = {want, want2};
    Tensor gots[] = {got, got2};
    exec::run_fused(body, ins, wants, 7);
    EXPECT_EQ(program.run(ins, gots), reuse);
    EXPECT_TRUE(bitwise_equal(got, want));
    EXPECT_TRUE(bitwise_equal(got2, want));
    EXPECT_EQ(got.storage().use_count(), 2) << "the program still holds an output";  // gots[]
  };
  Tensor big = random_tensor({6, 10}, DType::bf16, rng);
  for (int run = 0; run < 3; ++run) {  // x flat, s a strided slice, e broadcast: new tensors each run
    Tensor x = random_tensor({6, 5}, DType::f32, rng), e = random_tensor({5}, DType::f32, rng);
    Tensor s = big.as_strided({6, 5}, {10, 2}, run % 2);
    run_both(x, s, e, run > 0, "same layout");
    EXPECT_EQ(x.storage().use_count(), 1) << "the program still holds input x";
  }
  EXPECT_EQ(program.preparations(), 1u);
  Tensor xt = random_tensor({5, 6}, DType::f32, rng).as_strided({6, 5}, {1, 6}, 0);
  run_both(xt, big.as_strided({6, 5}, {10, 2}, 0), random_tensor({5}, DType::f32, rng), false,
           "x now strided: prepared again");
  run_both(random_tensor({6, 5}, DType::f32, rng), random_tensor({6, 5}, DType::bf16, rng),
           random_tensor({5}, DType::f32, rng), false, "x flat and s dense: prepared again");
  EXPECT_EQ(program.preparations(), 3u);
  Tensor x = random_tensor({6, 5}, DType::f32, rng);
  Tensor wrong = random_tensor({6, 5}, DType::f32, rng);  // s must be bf16
  Tensor out = Tensor::empty({6, 5}, DType::f32), out2 = Tensor::empty({6, 5}, DType::f32);
  Tensor ins[] = {x, wrong, random_tensor({5}, DType::f32, rng)};
  Tensor outs[] = {out, out2};
  try {
    program.run(ins, outs);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input 's' is f32[6, 5] but the body expects bf16[6, 5]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(x.storage().use_count(), 2) << "the program holds x after an error";  // ins[] and x
}

// An input that does not broadcast to the region's shape is refused with its name.
TEST(FusedCasts, RefusesAnInputThatDoesNotBroadcast) {
  auto g = ir::parse_graph(R"(graph f(x: f32[4, 6], m: f32[4, 1]) {
  r = fused(x, m) {
    a = aten::mul.Tensor(x, m)
    b = aten::neg(a)
    return b
  }
  return r
}
)");
  const ir::Graph& body = *g->nodes()[0]->body();
  Tensor x = Tensor::empty({4, 6}, DType::f32);
  Tensor wrong = Tensor::empty({1, 6}, DType::f32);  // m is [4, 1] in the body
  Tensor out = Tensor::empty({4, 6}, DType::f32);
  Tensor ins[] = {x, wrong};
  Tensor outs[] = {out};
  try {
    exec::run_fused(body, ins, outs);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input 'm' is f32[1, 6] but the body expects f32[4, 1]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace symmflow
