// Compiled plans on the GPU: every example that has cuda kernels, at 1 and 2 ranks (two ranks
// share the GPU on a one-GPU host), run by exec::Executable on a GPU and compared with the eager
// cpu interpreter on the same per-rank random inputs; the whole plan captured once and replayed
// 1000 times with new input values; zero-copy input binding; the refusal of a plan whose op has
// no cuda kernel; fused regions with casts and broadcast inputs against the cpu's fused executor.
// Skipped without a GPU.
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/scoped_tunables.hpp"

#include "exec/cuda/fused.hpp"
#include "kernels/cuda/pointwise/pointwise_codegen.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/exec/compare.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/fused.hpp"
#include "symmflow/exec/interpret.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/passes/passes.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::cuda {
namespace {

std::string read_example(const std::string& name) {
  std::ifstream in(std::string(SYMMFLOW_EXAMPLES_DIR) + "/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::unique_ptr<ir::Graph> load(const std::string& name, int world) {
  return ir::parse_graph(read_example(name), {name, world});
}

Tensor random(const ir::TensorType& t, uint64_t seed) {
  Tensor x = Tensor::empty(t.shape, t.dtype);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 7;
  const double scale = t.shape.size() >= 2 ? 1.0 / std::sqrt(double(t.shape[0])) : 1.0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    store_double(x.view(), i, (double(s >> 11) * 0x1.0p-53 * 2 - 1) * scale);
  }
  return x;
}

void expect_close(const Tensor& got_gpu, const Tensor& want, const std::string& what) {
  const double tol = want.dtype() == DType::f32 ? 1e-5 : 2e-2;
  exec::Comparison c = exec::compare(to_host(got_gpu), want, tol, what);
  ASSERT_FALSE(c.mismatch) << *c.mismatch;
}

// Runs fn on `world` rank threads bound to the GPUs (round robin).
void on_ranks(int world, const std::function<void(Runtime&)>& fn) {
  run_threads(world, [&](Runtime& rt) {
    int dev = bind_device();
    (void)dev;
    fn(rt);
  }, ThreadsOptions{60});
}

class CudaExec : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no GPU";
  }
};

// Compiles `text` for worlds 1 and 2 and runs it on the GPUs: the first run captures, two more
// replay with new inputs; every output against the cpu interpreter on the same inputs.
void expect_matches_interpreter(const std::string& name, const std::string& text) {
  for (int world : {1, 2}) {
    auto plan = passes::compile(ir::parse_graph(text, {name, world}));
    auto source = std::shared_ptr<ir::Graph>(ir::parse_graph(text, {name, world}));
    on_ranks(world, [&](Runtime& rt) {
      int dev = bind_device();
      exec::Executable exe(plan, exec::ExecOptions{Device::cuda(dev)});
      for (int iter = 0; iter < 3; ++iter) {  // capture, then replays with new inputs
        std::vector<Tensor> inputs;
        for (const ir::Value* v : plan->graph->inputs())
          inputs.push_back(random(v->type(), uint64_t(100 * iter + rt.rank() + 1)));
        std::vector<Tensor> host_inputs;
        for (const Tensor& t : inputs) host_inputs.push_back(call("aten::clone", {t}).to_tensor());
        std::vector<Tensor> got = exe.run(inputs);
        std::vector<Tensor> want = exec::interpret(*source, host_inputs);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i)
          expect_close(got[i], want[i],
                       fmt::format("{} world {} rank {} iter {} output {}", name, world,
                                   rt.rank(), iter, i));
      }
      EXPECT_NE(exe.device_description().find("CUDA graph of"), std::string::npos)
          << exe.device_description();
    });
  }
}

TEST_P(CudaExec, MatchesTheInterpreterAndReplays) {
  expect_matches_interpreter(GetParam(), read_example(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Examples, CudaExec,
                         ::testing::Values("tp_mlp_small.sf", "pointwise_then_allreduce.sf",
                                           "input_allreduce.sf", "inplace_allreduce.sf",
                                           "halo_exchange.sf", "halo_exchange_signal.sf",
                                           "decoder_block.sf", "decoder_block_aten.sf"),
                         [](const auto& param_info) {
                           const std::string& file = param_info.param;
                           return file.substr(0, file.find('.'));
                         });

TEST(CudaExecGraph, ThousandReplaysWithNewInputsAndZeroCopy) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  auto plan = passes::compile(load("input_allreduce.sf", 2));
  on_ranks(2, [&](Runtime& rt) {
    int dev = bind_device();
    exec::Executable exe(plan, exec::ExecOptions{Device::cuda(dev)});
    Tensor x = exe.input_handle(0);  // the staging buffer in GPU symmetric memory
    ASSERT_TRUE(x.is_symmetric());
    const int64_t n = x.numel();
    for (int it = 0; it < 1000; ++it) {
      // Rank r holds (it + 1) * (r + 1) + i % 7: the sum over 2 ranks is 3 (it + 1) + 2 (i % 7).
      Tensor h = Tensor::empty(x.shape(), x.dtype());
      for (int64_t i = 0; i < n; ++i)
        store_double(h.view(), i, double((it + 1) * (rt.rank() + 1) + i % 7));
      call("aten::copy_", {x, h});
      exec::RunOptions views;
      views.output_mode = exec::OutputMode::view;
      std::vector<Tensor> out = exe.run({x}, views);
      ASSERT_EQ(exe.last_stats().copies, 0u) << "iteration " << it;
      ASSERT_EQ(exe.last_stats().input_copies_skipped, 1u);
      if (it % 100 != 99) continue;
      std::vector<double> got = to_host(out[0]).to_doubles();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[size_t(i)], 3.0 * (it + 1) + 2.0 * double(i % 7)) << "iteration " << it;
    }
  });
}

// Deterministic mode (Note [skinny GEMM rows] in src/kernels/cuda/gemm/skinny_gemm.cu) binds GPU
// plans: the decoder blocks and the MLP match the interpreter at worlds 1 and 2 through its
// kernels, captured and replayed.
TEST(CudaExecGraph, DeterministicModeRunsGpuPlans) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  Tunables t = tunables();
  t.deterministic = true;
  testing::ScopedTunables on(t);
  for (const char* name : {"tp_mlp_small.sf", "decoder_block.sf", "decoder_block_aten.sf"})
    expect_matches_interpreter(name, read_example(name));
}

std::vector<TensorSpec> like_input(std::span<const Value> args) {
  const Tensor& x = args[0].to_tensor();
  return {{x.dtype(), x.shape()}};
}
SYMMFLOW_LIBRARY(cudatest, m) { m.def("cpu_only(Tensor x) -> Tensor", like_input); }
SYMMFLOW_LIBRARY_IMPL(cudatest, cpu, m) {
  m.impl("cpu_only", [](KernelCall& c) { call("aten::copy_", {c.out(0), c.arg(0)}); });
}

// Every op a GPU fused region takes, in f32 (float compute), bf16 and f16 (float compute, rounded
// per op) and f64 (double compute): the region's compiled kernel (Note [pointwise codegen]) gives
// the interpreter's bits on every element, once per region text, also when first met during a
// CUDA graph capture.
constexpr const char* kEveryFusedOp = R"(graph every_op(x: DT[4099], y: DT[4099]) {
  a = aten::mul.Scalar(x, 1.5)
  b = aten::add.Tensor(a, y, alpha=0.25)
  c = aten::sub.Tensor(b, x)
  d = aten::div.Tensor(c, y)
  e = aten::sin(d)
  f = aten::cos(e)
  g = aten::exp(f)
  h = aten::tanh(g)
  i = aten::sigmoid(h)
  j = aten::silu(i)
  k = aten::gelu(j)
  l = aten::gelu(k, approximate="tanh")
  m = aten::relu(l)
  n = aten::neg(m)
  o = aten::add.Scalar(n, 0.1)
  p = aten::mul.Tensor(o, d)
  q = aten::pow.Tensor_Scalar(p, 2.0)
  r = aten::rsub.Scalar(q, 1.0, alpha=0.5)
  s = aten::pow.Tensor_Scalar(r, 3)
  t = aten::pow.Tensor_Scalar(s, 0.7)
  return t, d
}
)";

TEST(CudaFused, CompiledRegionsEqualTheInterpreterBitwise) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  run_threads(1, [](Runtime&) {
    bind_device();
    for (const char* dt : {"f32", "bf16", "f16", "f64"}) {
      std::string text = kEveryFusedOp;
      for (size_t at; (at = text.find("DT")) != std::string::npos;) text.replace(at, 2, dt);
      auto plan = passes::compile(ir::parse_graph(text));
      std::vector<const ir::Graph*> bodies;
      size_t ops = 0;
      for (const passes::PlanStep& step : plan->steps) {
        const ir::Node* node = step.node;
        if (node->kind() != ir::NodeKind::fused) continue;
        bodies.push_back(node->body());
        ops += node->body()->nodes().size();
      }
      ASSERT_EQ(ops, 20u) << dt << ": every op in a fused region";
      const int before = compiled_pointwise_kernels();
      for (size_t r = 0; r < bodies.size(); ++r) {
        const ir::Graph& body = *bodies[r];
        std::vector<Tensor> in;
        for (const ir::Value* v : body.inputs())
          in.push_back(to_device(random(v->type(), in.size() + 1)));
        auto run = [&](bool codegen, bool capture) {
          Tunables saved = tunables(), t = saved;
          t.cuda_pointwise_codegen = codegen;
          set_tunables(t);
          std::vector<Tensor> out;
          for (const ir::Value* v : body.outputs())
            out.push_back(Tensor::empty(v->type().shape, v->type().dtype, in[0].device()));
          auto s = static_cast<cudaStream_t>(current_stream());
          cudaGraph_t graph = nullptr;
          cudaGraphExec_t exec = nullptr;
          if (capture) {
            EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
          }
          run_fused(body, in, out);
          if (capture) {
            EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
            EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
            EXPECT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
          }
          std::vector<Tensor> host;
          for (const Tensor& o : out) host.push_back(to_host(o));
          if (exec) cudaGraphExecDestroy(exec);
          if (graph) cudaGraphDestroy(graph);
          set_tunables(saved);
          return host;
        };
        std::vector<Tensor> want = run(false, false);
        // The first region compiles on first use inside a capture, the others eagerly.
        for (bool capture : {r == 0, r != 0}) {
          std::vector<Tensor> got = run(true, capture);
          for (size_t o = 0; o < got.size(); ++o) {
            std::vector<double> a = got[o].to_doubles(), b = want[o].to_doubles();
            for (size_t i = 0; i < a.size(); ++i) {
              if (std::isnan(a[i]) && std::isnan(b[i])) continue;
              ASSERT_EQ(a[i], b[i]) << dt << " region " << r << " output " << o << " element "
                                    << i << (capture ? " (captured)" : "");
            }
          }
        }
      }
      EXPECT_EQ(compiled_pointwise_kernels(), before + int(bodies.size()))
          << dt << ": one kernel per region, compiled once";
    }
  });
}

// Note [fused casts and broadcasts]: regions with casts between f32, bf16 and f16 and inputs
// broadcast along leading (cos), middle (sin), trailing (row) and every (k) dim, x a permuted
// view. The broadcast region (exact ops only) compiles with strided and stride-0 loads and gives
// the generic kernel's and the cpu fused executor's bits; the SwiGLU tail as torch writes it
// (casts around sigmoid and mul, which share the cast's register) is flat and gives the generic
// kernel's bits (the cpu's to a bf16 unit: the sigmoid's exp may differ by an ulp).
constexpr const char* kBroadcastRegion = R"(graph rot(x: DT[3, 7, 13], r: DT[3, 7, 13], cos: DT[7, 13], sin: DT[3, 1, 13], k: DT[1], row: DT[7, 1]) {
  a = aten::mul.Tensor(x, cos)
  b = aten::mul.Tensor(r, sin)
  c = aten::add.Tensor(a, b)
  d = aten::sub.Tensor(c, k, alpha=2)
  e = aten::mul.Tensor(row, d)
  f = aten::_to_copy(e, dtype=f16)
  g = aten::neg(f)
  h = aten::_to_copy(g, dtype=f32)
  return h
}
)";
constexpr const char* kSwigluRegion = R"(graph swiglu(g: DT[7, 13], u: DT[7, 13]) {
  a = aten::_to_copy(g, dtype=f32)
  s = aten::sigmoid(a)
  m = aten::mul.Tensor(a, s)
  b = aten::_to_copy(m, dtype=DT)
  c = aten::mul.Tensor(b, u)
  return c
}
)";

std::vector<Tensor> run_region_on_gpu(const ir::Graph& body, const std::vector<Tensor>& in,
                                      bool codegen) {
  Tunables saved = tunables(), t = saved;
  t.cuda_pointwise_codegen = codegen;
  set_tunables(t);
  std::vector<Tensor> out, host;
  for (const ir::Value* v : body.outputs())
    out.push_back(Tensor::empty(v->type().shape, v->type().dtype, in[0].device()));
  run_fused(body, in, out);
  for (const Tensor& o : out) host.push_back(to_host(o));
  set_tunables(saved);
  return host;
}

void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  std::vector<double> a = got.to_doubles(), b = want.to_doubles();
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    ASSERT_EQ(a[i], b[i]) << what << " element " << i;
  }
}

TEST(CudaFused, CastsAndBroadcastInputsEqualTheCpu) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  run_threads(1, [](Runtime&) {
    bind_device();
    for (const char* dt : {"f32", "bf16", "f16"}) {
      for (const char* region : {kBroadcastRegion, kSwigluRegion}) {
        std::string text = region;
        for (size_t at; (at = text.find("DT")) != std::string::npos;) text.replace(at, 2, dt);
        auto g = ir::parse_graph(text);
        passes::fuse_pointwise(*g);
        ASSERT_EQ(g->nodes().size(), 1u) << ir::print_graph(*g);
        const ir::Graph& body = *g->nodes()[0]->body();
        std::vector<Tensor> in, in_gpu, cpu;
        for (const ir::Value* v : body.inputs()) {
          in.push_back(random(v->type(), in.size() + 1));
          in_gpu.push_back(to_device(in.back()));
        }
        if (region == kBroadcastRegion) {  // x as a permuted view ([7, 3, 13] laid out), as q is
          const ir::TensorType t = body.inputs()[0]->type();
          Tensor base = random(ir::TensorType{t.dtype, {7, 3, 13}}, 99);
          Tensor base_gpu = to_device(base);
          in[0] = base.as_strided({3, 7, 13}, {13, 39, 1}, 0);
          in_gpu[0] = base_gpu.as_strided({3, 7, 13}, {13, 39, 1}, 0);
        }
        for (const ir::Value* v : body.outputs())
          cpu.push_back(Tensor::empty(v->type().shape, v->type().dtype));
        exec::run_fused(body, in, cpu);
        std::vector<Tensor> generic = run_region_on_gpu(body, in_gpu, false);
        const int kernels_before = compiled_pointwise_kernels();
        std::vector<Tensor> compiled = run_region_on_gpu(body, in_gpu, true);
        EXPECT_EQ(compiled_pointwise_kernels(), kernels_before + 1)
            << "the region compiles, strided inputs included (Note [pointwise codegen])";
        const std::string what = fmt::format("{} {}", g->name(), dt);
        expect_same_bits(compiled[0], generic[0], what + " compiled vs generic");
        if (region == kBroadcastRegion) {
          expect_same_bits(generic[0], cpu[0], what + " gpu vs cpu");
        } else {
          exec::Comparison c = exec::compare(generic[0], cpu[0], 2e-2, what + " gpu vs cpu");
          ASSERT_FALSE(c.mismatch) << *c.mismatch;
        }
      }
    }
  });
}

// Two decode-shaped layers (16 rows, 4096 columns, bf16): the GEMMs take the skinny kernel on
// an H100 or H200 (skinny_gemm_fits), inside the captured plan, beside the one-shot all-reduce.
// (The 8-layer examples/tp_mlp.sf drifts by up to 3.4% of its rms from the cpu, with cuBLAS as
// with the skinny kernel: `run --check` allows for its depth; `tools/device/sf.sh examples` runs
// it.)
constexpr const char* kDecodeLayers = R"(group tp
graph decode_layers(x: bf16[16, 1024], w0: bf16[1024, 4096], w1: bf16[4096, 4096]) {
  h0 = aten::mm(x, w0)
  r0 = symm_mem::one_shot_all_reduce(h0, "sum", "tp")
  h1 = aten::mm(r0, w1)
  r1 = symm_mem::one_shot_all_reduce(h1, "sum", "tp")
  return r1
}
)";

TEST(CudaExecGraph, DecodeShapedLayersWithTheSkinnyGemm) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  expect_matches_interpreter("decode_layers", kDecodeLayers);
}

// Note [early launch]: the same layers with every step after the first starting early (at 2
// ranks the second GEMM loads its weight while the all-reduce ahead of it runs) and with none:
// the same bits, on every element, on new inputs each run, at worlds 1 and 2; the plan says how
// many steps start early.
TEST(CudaExecGraph, EarlyLaunchGivesTheBitsOfPlainLaunches) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  for (int world : {1, 2}) {
    auto plan = passes::compile(ir::parse_graph(kDecodeLayers, {"decode_layers", world}));
    std::vector<std::vector<double>> results[2];  // [early][rank * 3 + iter]
    for (bool early : {false, true}) {
      Tunables saved = tunables(), t = saved;
      t.cuda_early_launch = early;
      set_tunables(t);
      results[early].resize(size_t(world) * 3);
      on_ranks(world, [&](Runtime& rt) {
        int dev = bind_device();
        exec::Executable exe(plan, exec::ExecOptions{Device::cuda(dev)});
        // Every step on the compute stream; all but the first start early, or none.
        EXPECT_NE(exe.device_description().find(fmt::format(
                      "(0 of 4 steps on the communication stream, {} start early)", early ? 3 : 0)),
                  std::string::npos)
            << exe.device_description();
        for (int iter = 0; iter < 3; ++iter) {
          std::vector<Tensor> inputs;
          for (const ir::Value* v : plan->graph->inputs())
            inputs.push_back(random(v->type(), uint64_t(100 * iter + rt.rank() + 1)));
          results[early][size_t(rt.rank() * 3 + iter)] = to_host(exe.run(inputs)[0]).to_doubles();
        }
      });
      set_tunables(saved);
    }
    for (size_t r = 0; r < results[0].size(); ++r) {
      ASSERT_EQ(results[0][r].size(), size_t(16 * 4096));
      for (size_t i = 0; i < results[0][r].size(); ++i)
        ASSERT_EQ(results[1][r][i], results[0][r][i])
            << "world " << world << " rank " << r / 3 << " run " << r % 3 << " element " << i;
    }
    EXPECT_NE(results[0][0], results[0][1]);  // the runs saw new inputs
  }
}

// Note [plan steps compiled] (kernels/cuda/pointwise/program.cpp): a plan's standalone pointwise steps (a
// transposed copy, a cast) run as compiled programs, bit for bit what the interpreted kernel
// gives; eager calls of the same ops compile nothing. A standalone pow (which codegen does not
// spell: its special exponents are the interpreter's) runs interpreted inside the plan too.
constexpr const char* kCopySteps = R"(
graph copy_steps(x: DT[16, 8, 64]) {
  t = aten::transpose.int(x, 0, 1)
  c = aten::clone(t)
  f = aten::_to_copy(c, dtype=f32)
  p = aten::pow.Tensor_Scalar(x, 3.0)
  q = aten::pow.Tensor_Scalar(x, 0.5)
  return c, f, p, q
}
)";

TEST(CudaExecGraph, PlanPointwiseStepsRunCompiledWithTheInterpretersBits) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  for (const char* dt : {"bf16", "f16", "f32"}) {
    SCOPED_TRACE(dt);
    std::string text = kCopySteps;
    for (size_t at; (at = text.find("DT")) != std::string::npos;) text.replace(at, 2, dt);
    auto plan = passes::compile(ir::parse_graph(text, {"copy_steps", 1}));
    const Tensor x = random(plan->graph->inputs()[0]->type(), 7);
    std::vector<Tensor> want;  // eager: the interpreted kernel
    run_threads(1, [&](Runtime&) {
      bind_device();
      const int64_t before = compiled_pointwise_launches();
      const Tensor xd = to_device(x);
      Tensor t = call("aten::transpose.int", {xd, int64_t(0), int64_t(1)}).to_tensor();
      Tensor c = call("aten::clone", {t}).to_tensor();
      want.push_back(to_host(c));
      want.push_back(to_host(call("aten::_to_copy", {c}, {{"dtype", DType::f32}}).to_tensor()));
      for (double e : {3.0, 0.5})
        want.push_back(to_host(call("aten::pow.Tensor_Scalar", {xd, e}).to_tensor()));
      EXPECT_EQ(compiled_pointwise_launches(), before) << "eager calls launched a compiled kernel";
    });
    run_threads(1, [&](Runtime&) {
      const int dev = bind_device();
      const int64_t before = compiled_pointwise_launches();
      exec::Executable exe(plan, exec::ExecOptions{Device::cuda(dev)});
      for (int iter = 0; iter < 2; ++iter) {
        std::vector<Tensor> got = exe.run({to_device(x)});
        ASSERT_EQ(got.size(), 4u);
        for (size_t o = 0; o < 4; ++o) {
          // Equal element by element, NaN (pow 0.5 of a negative) matching NaN.
          const std::vector<double> g = to_host(got[o]).to_doubles(), w = want[o].to_doubles();
          ASSERT_EQ(g.size(), w.size());
          for (size_t n = 0; n < g.size(); ++n) {
            if (std::isnan(g[n]) && std::isnan(w[n])) continue;
            ASSERT_EQ(g[n], w[n]) << "output " << o << " run " << iter << " element " << n;
          }
        }
      }
      EXPECT_GE(compiled_pointwise_launches(), before + 1) << "the plan's copy steps";
    });
  }
}

TEST(CudaExecGraph, AnOpWithoutACudaKernelIsRefusedAtConstruction) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  auto plan = passes::compile(ir::parse_graph(
      "graph g(x: f32[8]) {\n  y = cudatest::cpu_only(x)\n  return y\n}\n", {"cpu_only", 1}));
  std::string message;
  on_ranks(1, [&](Runtime&) {
    int dev = bind_device();
    try {
      exec::Executable exe(plan, exec::ExecOptions{Device::cuda(dev)});
    } catch (const Error& e) {
      message = e.what();
    }
  });
  EXPECT_NE(message.find("(cudatest::cpu_only) has no cuda kernel yet"), std::string::npos)
      << message;
}

TEST(CudaExecGraph, NonSymmetricInputToACollectiveNamesTheFix) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  std::vector<std::string> messages(2);
  on_ranks(2, [&](Runtime& rt) {
    Tensor x = to_device(Tensor::full({8}, DType::f32, 1));
    try {
      call("symm_mem::one_shot_all_reduce", {x, "sum", "world"});
    } catch (const Error& e) {
      messages[size_t(rt.rank())] = e.what();
    }
  });
  for (size_t r = 0; r < messages.size(); ++r) {  // rank r is bound to GPU r % GPUs
    const std::string& m = messages[r];
    EXPECT_NE(m.find(fmt::format("argument 'input' of symm_mem::one_shot_all_reduce (f32[8] on "
                                 "cuda:{}) is not in GPU symmetric memory; allocate it with "
                                 "symmflow::cuda::empty_symmetric",
                                 int(r) % device_count())),
              std::string::npos)
        << m;
  }
}

TEST(CudaEager, AllReduceOpsOnSymmetricTensors) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    for (int64_t n : {1, 7, 1023, 4099, 1 << 20}) {
      on_ranks(2, [&](Runtime& rt) {
        Tensor h = Tensor::empty({n}, d);
        for (int64_t i = 0; i < n; ++i) store_double(h.view(), i, double((rt.rank() + 1) * (i % 5)));
        Tensor x = cuda::empty_symmetric({n}, d, "world");
        call("aten::copy_", {x, h});
        Tensor r = call("symm_mem::one_shot_all_reduce", {x, "sum", "world"}).to_tensor();
        call("symm_mem::two_shot_all_reduce_", {x, "max", "world"});
        std::vector<double> a = to_host(r).to_doubles(), b = to_host(x).to_doubles();
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(a[size_t(i)], 3.0 * double(i % 5)) << dtype_name(d) << " n=" << n;
          ASSERT_EQ(b[size_t(i)], 2.0 * double(i % 5)) << dtype_name(d) << " n=" << n;
        }
      });
    }
  }
}

}  // namespace
}  // namespace symmflow::cuda
