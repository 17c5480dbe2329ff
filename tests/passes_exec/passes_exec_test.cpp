// Execution tests of functionalize, fuse_pointwise and reinplace: compiled == eager, bitwise.
// Each graph runs eagerly op by op (mutating ops mutate their argument tensors), then after each
// pass (functional<op> nodes copy their written args, fused nodes run through exec::run_fused),
// and every output and every caller input buffer is compared byte for byte.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>

#include "passes_exec/interpreter.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/ir/verify.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/passes/passes.hpp"

namespace symmflow {
namespace {

std::vector<TensorSpec> like_first(std::span<const Value> a) {
  const Tensor& x = a[0].to_tensor();
  return {{x.dtype(), x.shape()}};
}

// x += s * y (f32, same shape).
void scale_acc_kernel(KernelCall& c) {
  const Tensor& x = c.arg(0).to_tensor();
  const Tensor& y = c.arg(1).to_tensor();
  float s = float(c.arg(2).to_double());
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] += s * y.data<float>()[i];
}

// ret = a + b; then a *= 2, b -= 1 (two written args and a fresh return).
void split_kernel(KernelCall& c) {
  const Tensor& a = c.arg(0).to_tensor();
  const Tensor& b = c.arg(1).to_tensor();
  const Tensor& r = c.out(0);
  for (int64_t i = 0; i < a.numel(); ++i) {
    r.data<float>()[i] = a.data<float>()[i] + b.data<float>()[i];
    a.data<float>()[i] *= 2;
    b.data<float>()[i] -= 1;
  }
}

void twice_kernel(KernelCall& c) {
  const Tensor& x = c.arg(0).to_tensor();
  const Tensor& o = c.out(0);
  for (int64_t i = 0; i < x.numel(); ++i) o.data<float>()[i] = 2 * x.data<float>()[i] + 1;
}

void twice_inplace_kernel(KernelCall& c) {
  const Tensor& x = c.arg(0).to_tensor();
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 2 * x.data<float>()[i] + 1;
}

}  // namespace
}  // namespace symmflow

SYMMFLOW_LIBRARY(t_fn, m) {
  using namespace symmflow;
  m.def("scale_acc_(Tensor(a!) x, Tensor y, float s) -> ()");   // no functional variant
  m.def("split_(Tensor(a!) a, Tensor(b!) b) -> Tensor", like_first);
  m.def("twice(Tensor x) -> Tensor", like_first);                 // linked to twice_
  m.def("twice_(Tensor(a!) x) -> ()");
}

SYMMFLOW_LIBRARY_IMPL(t_fn, cpu, m) {
  m.impl("scale_acc_", symmflow::scale_acc_kernel);
  m.impl("split_", symmflow::split_kernel);
  m.impl("twice", symmflow::twice_kernel);
  m.impl("twice_", symmflow::twice_inplace_kernel);
}

namespace symmflow {
namespace {

using testing::bitwise_equal;
using testing::clone_tensor;
using testing::interpret;

Tensor random_tensor(const Shape& shape, DType dtype, std::mt19937& rng) {
  std::uniform_real_distribution<double> d(-2.0, 2.0);
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) store_double(t.view(), i, d(rng));
  return t;
}

struct Counts {
  int functional = 0, fused = 0, writebacks = 0, inplace_restored = 0;
};

// Runs `g` eagerly, then after functionalize, fuse_pointwise and reinplace; all must agree bitwise.
void check_compiled_equals_eager(ir::Graph& g, uint32_t seed, Counts* counts = nullptr) {
  std::mt19937 rng(seed);
  std::vector<Tensor> data;
  for (const ir::Value* v : g.inputs()) data.push_back(random_tensor(v->type().shape, v->type().dtype, rng));
  auto fresh_inputs = [&] {
    std::vector<Tensor> in;
    for (const Tensor& t : data) in.push_back(clone_tensor(t));
    return in;
  };
  std::vector<Tensor> eager_in = fresh_inputs();
  std::vector<Tensor> eager_out = interpret(g, eager_in);
  std::string before = ir::print_graph(g);
  auto compare = [&](const std::string& stage) {
    SCOPED_TRACE(stage + ":\n" + ir::print_graph(g) + "from:\n" + before);
    ASSERT_TRUE(ir::verify_graph(g).empty()) << ir::format_diagnostics(ir::verify_graph(g), "", "");
    std::vector<Tensor> in = fresh_inputs();
    std::vector<Tensor> out = interpret(g, in);
    ASSERT_EQ(out.size(), eager_out.size());
    for (size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(bitwise_equal(out[i], eager_out[i])) << "output " << i;
    for (size_t i = 0; i < in.size(); ++i)
      EXPECT_TRUE(bitwise_equal(in[i], eager_in[i])) << "input " << g.inputs()[i]->name();
  };
  passes::functionalize(g);
  for (const ir::Node* n : g.nodes()) {
    EXPECT_TRUE(n->kind() != ir::NodeKind::op || !n->op()->aliases().is_mutable()) << n->display_name();
    if (counts && n->kind() == ir::NodeKind::functional) ++counts->functional;
  }
  if (counts) counts->writebacks += int(g.writebacks().size());
  compare("after functionalize");
  passes::fuse_pointwise(g);
  for (const ir::Node* n : g.nodes()) {
    if (counts && n->kind() == ir::NodeKind::fused) ++counts->fused;
  }
  compare("after fuse_pointwise");
  passes::reinplace(g);
  for (const ir::Node* n : g.nodes()) {
    if (counts && n->kind() == ir::NodeKind::op && n->op()->aliases().is_mutable()) ++counts->inplace_restored;
    if (n->kind() == ir::NodeKind::functional) {
      EXPECT_TRUE(n->attrs().count("reason"));
    }
  }
  compare("after reinplace");
}

// A random program over values of one type: fresh pointwise ops, Scalar ops, in-place and out
// calls (graph inputs included), custom mutating ops (f32), several outputs.
std::unique_ptr<ir::Graph> random_graph(uint32_t seed, DType dtype, const Shape& shape, int steps) {
  std::mt19937 rng(seed);
  auto g = std::make_unique<ir::Graph>("rand");
  ir::TensorType t{dtype, shape};
  std::vector<ir::Value*> vals;
  int n_inputs = 2 + int(rng() % 2);
  for (int i = 0; i < n_inputs; ++i) vals.push_back(g->add_input("x" + std::to_string(i), t));
  auto pick = [&] { return vals[rng() % vals.size()]; };
  auto A = [](ir::Value* v) { return ir::Arg::of(v); };
  auto L = [](symmflow::Value v) { return ir::Arg::of_literal(std::move(v)); };
  const char* unary[] = {"aten::sin", "aten::cos", "aten::tanh", "aten::relu", "aten::neg",
                         "aten::sigmoid", "aten::silu", "aten::gelu", "aten::exp"};
  const char* binary[] = {"aten::add.Tensor", "aten::sub.Tensor", "aten::mul.Tensor", "aten::div.Tensor"};
  const char* unary_inplace[] = {"aten::sin_", "aten::relu_", "aten::tanh_", "aten::neg_"};
  const char* binary_inplace[] = {"aten::add_.Tensor", "aten::mul_.Tensor", "aten::sub_.Tensor"};
  bool f32 = dtype == DType::f32;
  for (int s = 0; s < steps; ++s) {
    int kind = int(rng() % (f32 ? 10 : 8));
    switch (kind) {
      case 0: case 1: vals.push_back(g->add_op(unary[rng() % 9], {A(pick())})->output()); break;
      case 2: case 3: vals.push_back(g->add_op(binary[rng() % 4], {A(pick()), A(pick())})->output()); break;
      case 4:
        vals.push_back(g->add_op(rng() % 2 ? "aten::mul.Scalar" : "aten::add.Scalar", {A(pick()), L(0.75)})->output());
        break;
      case 5: g->add_op(unary_inplace[rng() % 4], {A(pick())}); break;
      case 6: {
        const char* op = binary_inplace[rng() % 3];
        std::vector<ir::KwArg> kw;
        if (op[6] != 'm') kw.emplace_back("alpha", L(int64_t(1 + rng() % 2)));
        g->add_op(op, {A(pick()), A(pick())}, kw);
        break;
      }
      case 7:
        if (rng() % 2) {
          g->add_op("aten::mul.out", {A(pick()), A(pick())}, {{"out", A(pick())}});
        } else {
          g->add_op("aten::sin.out", {A(pick())}, {{"out", A(pick())}});
        }
        break;
      case 8: g->add_op("t_fn::scale_acc_", {A(pick()), A(pick()), L(0.5)}); break;
      case 9: {
        ir::Value* a = pick();
        ir::Value* b = pick();
        if (a == b) {
          g->add_op("t_fn::twice_", {A(a)});
        } else {
          vals.push_back(g->add_op("t_fn::split_", {A(a), A(b)})->output());
        }
        break;
      }
    }
  }
  std::vector<ir::Value*> outs;
  for (int i = 0; i < 3; ++i) outs.push_back(pick());
  outs.push_back(vals.back());
  g->set_outputs(outs);
  return g;
}

TEST(PassesExec, RandomF32GraphsMatchEagerBitwise) {
  Counts counts;
  for (uint32_t seed = 0; seed < 150; ++seed) {
    SCOPED_TRACE(seed);
    auto g = random_graph(seed, DType::f32, {3, 7}, 14);
    check_compiled_equals_eager(*g, seed, &counts);
    if (HasFatalFailure() || HasNonfatalFailure()) break;
  }
  // The generator exercises every transformation.
  EXPECT_GT(counts.functional, 20);
  EXPECT_GT(counts.fused, 20);
  EXPECT_GT(counts.writebacks, 20);
  EXPECT_GT(counts.inplace_restored, 10);
}

TEST(PassesExec, RandomBf16GraphsMatchEagerBitwise) {
  Counts counts;
  for (uint32_t seed = 0; seed < 100; ++seed) {
    SCOPED_TRACE(seed);
    auto g = random_graph(1000 + seed, DType::bf16, {2, 9}, 12);
    check_compiled_equals_eager(*g, seed, &counts);
    if (HasFatalFailure() || HasNonfatalFailure()) break;
  }
  EXPECT_GT(counts.fused, 20);
}

TEST(PassesExec, LargeChainsCrossChunkBoundaries) {
  for (DType dt : {DType::f32, DType::bf16}) {
    auto g = ir::parse_graph(fmt::format(R"(
graph f(x: {0}[3, 5001], y: {0}[3, 5001]) {{
  a = aten::sin(x)
  b = aten::mul.Scalar(a, 2.0)
  c = aten::add.Tensor(b, y, alpha=3)
  aten::tanh_(c)
  d = aten::gelu(c, approximate="tanh")
  e = aten::div.Tensor(d, y)
  aten::add_.Tensor(y, e)
  return e
}}
)", dtype_name(dt)));
    Counts counts;
    check_compiled_equals_eager(*g, 7, &counts);
    EXPECT_EQ(counts.fused, 1) << ir::print_graph(*g);
  }
}

TEST(PassesExec, CustomOpsFunctionalize) {
  auto g = ir::parse_graph(R"(
graph f(x: f32[4, 4], y: f32[4, 4]) {
  a = aten::sin(x)
  t_fn::scale_acc_(a, y, 0.5)
  r = t_fn::split_(a, y)
  t_fn::twice_(r)
  return a, r
}
)");
  Counts counts;
  std::string text;
  {
    auto copy = ir::parse_graph(ir::print_graph(*g));
    passes::functionalize(*copy);
    text = ir::print_graph(*copy);
  }
  EXPECT_NE(text.find("a_1 = functional<t_fn::scale_acc_>(a, y, 0.5)"), std::string::npos) << text;
  EXPECT_NE(text.find("r, a_2, y_1 = functional<t_fn::split_>(a_1, y)"), std::string::npos) << text;
  EXPECT_NE(text.find("r_1 = t_fn::twice(r)"), std::string::npos) << text;
  EXPECT_NE(text.find("writeback y = y_1"), std::string::npos) << text;
  EXPECT_NE(text.find("return a_2, r_1"), std::string::npos) << text;
  check_compiled_equals_eager(*g, 3, &counts);
  EXPECT_EQ(counts.functional, 2);
}

TEST(PassesExec, OutVariantsAndWritebacks) {
  auto g = ir::parse_graph(R"(
graph f(x: f32[5, 3], y: f32[5, 3], o: f32[5, 3]) {
  z = aten::zeros([5, 3])
  aten::mul.out(x, y, out=z)
  aten::sin.out(z, out=o)
  aten::add_.Tensor(x, o, alpha=2)
  aten::mul_.Tensor(x, y)
  return z
}
)");
  Counts counts;
  check_compiled_equals_eager(*g, 11, &counts);
  EXPECT_EQ(counts.writebacks, 2);
}

TEST(FusedExecutor, WritesStraightIntoSymmetricOutputs) {
  auto g = ir::parse_graph(R"(
graph f(x: f32[10000]) {
  f1, f2 = fused(x) {
    s = aten::sin(x)
    c = aten::cos(s)
    m = aten::mul.Scalar(c, 2.0)
    n = aten::neg(s)
    return m, n
  }
  return f1, f2
}
)");
  const ir::Node* fused = g->nodes()[0];
  std::mt19937 rng(5);
  Tensor x = random_tensor({10000}, DType::f32, rng);
  std::vector<float> mem1(10000 + 16), mem2(10000);
  auto sym = std::make_shared<Storage>(mem1.data(), mem1.size() * 4, Device::cpu(), MemoryKind::symmetric);
  Tensor out1 = Tensor::from_storage(sym, 64, DType::f32, {10000});
  Tensor out2 = Tensor::empty({10000}, DType::f32);
  Tensor ins[] = {x};
  Tensor outs[] = {out1, out2};
  for (int64_t chunk : {int64_t(1), int64_t(7), int64_t(4096), int64_t(1) << 20}) {
    exec::run_fused(*fused->body(), ins, outs, chunk);
    Tensor s = call("aten::sin", {x}).to_tensor();
    Tensor want1 = call("aten::mul.Scalar", {call("aten::cos", {s}), 2.0}).to_tensor();
    Tensor want2 = call("aten::neg", {s}).to_tensor();
    EXPECT_TRUE(out1.is_symmetric());
    EXPECT_EQ(out1.raw_data(), static_cast<void*>(reinterpret_cast<char*>(mem1.data()) + 64));
    EXPECT_TRUE(bitwise_equal(out1, want1)) << chunk;
    EXPECT_TRUE(bitwise_equal(out2, want2)) << chunk;
  }
}

TEST(FusedExecutor, RejectsMismatchedTensors) {
  auto g = ir::parse_graph(R"(
graph f(x: f32[8]) {
  f = fused(x) {
    s = aten::sin(x)
    c = aten::cos(s)
    return c
  }
  return f
}
)");
  const ir::Graph& body = *g->nodes()[0]->body();
  Tensor good = Tensor::empty({8}, DType::f32);
  Tensor wrong = Tensor::empty({8}, DType::bf16);
  Tensor in[] = {good};
  Tensor bad_out[] = {wrong};
  try {
    exec::run_fused(body, in, bad_out);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("output 'c' is bf16[8] but the body expects f32[8]"), std::string::npos)
        << e.what();
  }
  try {
    exec::run_fused(body, {}, in);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("takes 1 inputs but 0 were given"), std::string::npos) << e.what();
  }
}

// Timing of a 6-op f32 chain over 1M elements: the fused executor vs the same ops run eagerly
// (one full-size temporary per op). Run with --gtest_also_run_disabled_tests.
TEST(FusedExecutor, DISABLED_Benchmark) {
  const int64_t n = int64_t(1) << 20;
  auto g = ir::parse_graph(fmt::format(R"(
graph f(x: f32[{0}], y: f32[{0}]) {{
  a = aten::mul.Tensor(x, y)
  b = aten::add.Scalar(a, 1.0)
  c = aten::sigmoid(b)
  d = aten::mul.Tensor(c, x)
  e = aten::sub.Tensor(d, y)
  f = aten::relu(e)
  return f
}}
)", n));
  std::mt19937 rng(1);
  std::vector<Tensor> in = {random_tensor({n}, DType::f32, rng), random_tensor({n}, DType::f32, rng)};
  auto time = [](auto&& fn) {
    fn();
    double best = 1e30;
    for (int r = 0; r < 10; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      fn();
      best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  double eager = time([&] { interpret(*g, in); });
  // Unfused with planned buffers: each op through its kernel into a preallocated full-size tensor.
  std::vector<Tensor> planned;
  for (size_t k = 0; k < g->nodes().size(); ++k) planned.push_back(Tensor::empty({n}, DType::f32));
  double unfused = time([&] {
    std::unordered_map<const ir::Value*, Tensor> env = {{g->inputs()[0], in[0]}, {g->inputs()[1], in[1]}};
    for (size_t k = 0; k < g->nodes().size(); ++k) {
      const ir::Node* node = g->nodes()[k];
      std::vector<Value> bound;
      for (const ir::Arg& a : node->args()) bound.push_back(a.kind == ir::Arg::Kind::value ? Value(env.at(a.value)) : a.literal);
      std::vector<Value> outs = {planned[k]};
      call_bound_into(*node->op(), bound, outs);
      env[node->output()] = planned[k];
    }
  });
  // The ideal: one hand-written loop (what generated code would do).
  Tensor hand = Tensor::empty({n}, DType::f32);
  double handloop = time([&] {
    const float* x = in[0].data<float>();
    const float* y = in[1].data<float>();
    float* o = hand.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      float c = 1.0f / (1.0f + std::exp(-(x[i] * y[i] + 1.0f)));
      float e = c * x[i] - y[i];
      o[i] = e < 0 ? 0 : e;
    }
  });
  std::printf("eager (fresh outputs) %.3f ms, unfused into planned buffers %.3f ms, hand loop %.3f ms\n",
              eager, unfused, handloop);
  passes::fuse_pointwise(*g);
  ASSERT_EQ(g->nodes().size(), 1u);
  Tensor out = Tensor::empty({n}, DType::f32);
  Tensor outs[] = {out};
  for (int64_t chunk : {int64_t(1024), int64_t(2048), int64_t(4096), int64_t(8192), int64_t(65536), n}) {
    double fused = time([&] { exec::run_fused(*g->nodes()[0]->body(), in, outs, chunk); });
    std::printf("chunk %8ld: fused %.3f ms, eager op by op %.3f ms, eager/fused %.2fx\n", long(chunk), fused,
                eager, eager / fused);
  }
}

}  // namespace
}  // namespace symmflow
