// Attention's GPU kernels chosen by measurement (Note [measured kernel choice]): cuDNN's fused
// forward and backward (Note [cudnn attention]) and symmflow's own kernel, each forced in turn,
// against the cpu kernels on the same inputs, every element: causal or not, grouped KV heads 4:1
// and 2:1, odd lengths, L = 1 (decode) and long keys, permuted (strided) q/k/v read in place,
// bf16 and f16 (f32 and f64: the own kernel, cuDNN refusing them by name); masks on either
// kernel (cuDNN's as a bias; fully masked rows zeros); the measured choice, its disk cache and
// the error that lists every refusal. Skipped without a GPU; the cuDNN cases skip when cuDNN cannot be loaded,
// unless SYMMFLOW_REQUIRE_CUDNN=1 (the device scripts set it), which makes that a failure.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "attention_inputs.hpp"
#include "kernels/cuda/attention/cudnn_attention.hpp"
#include "kernels/cuda/choice/kernel_choice.hpp"
#include "support/tensors.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/ops/registry.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

constexpr const char* kFwd = "aten::scaled_dot_product_attention";
constexpr const char* kBwd = "aten::scaled_dot_product_attention_backward";

class CudaAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no GPU";
    bind_device();
    reset_kernel_choices();
  }
  void TearDown() override { force_kernel(""); }
  // Skips (or fails under SYMMFLOW_REQUIRE_CUDNN=1) when cuDNN is not usable here.
  bool need_cudnn() {
    if (cudnn_missing().empty()) return true;
    const char* req = std::getenv("SYMMFLOW_REQUIRE_CUDNN");
    if (req && std::string(req) == "1") {
      ADD_FAILURE() << "cuDNN is required but missing: " << cudnn_missing();
    }
    return false;
  }
};

Tensor random(const Shape& shape, DType dtype, uint64_t seed) {
  return symmflow::testing::random_tensor(shape, dtype, seed, -2, 2);
}

Tensor cpu_t(std::string_view op, const std::vector<Value>& args, const KwArgs& kw = {}) {
  return call(op, args, kw).to_tensor();
}

double tol(DType d) { return d == DType::bf16 ? 3e-2 : d == DType::f16 ? 4e-3 : 1e-5; }

void expect_close(const Tensor& got_gpu, const Tensor& want, double tolerance,
                  const std::string& what) {
  Tensor got = to_host(got_gpu);
  ASSERT_EQ(got.shape(), want.shape()) << what;
  std::vector<double> a = got.to_doubles(), b = want.to_doubles();
  double scale = 1;
  for (double x : b) scale = std::max(scale, std::abs(x));
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_FALSE(std::isnan(a[i])) << what << " element " << i;
    ASSERT_LE(std::abs(a[i] - b[i]), tolerance * scale)
        << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

// A random [b, h, l, e] operand on the host and on the GPU, permuted when `permuted`.
std::pair<Tensor, Tensor> input(int64_t b, int64_t h, int64_t l, int64_t e, DType d,
                                uint64_t seed, bool permuted) {
  return testing::attention_input(b, h, l, e, d, seed, permuted);
}

// The last recorded choice of `op`.
KernelChoice last_choice(std::string_view op) {
  std::vector<KernelChoice> all = kernel_choices();
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (it->op == op) return *it;
  ADD_FAILURE() << "no choice recorded for " << op;
  return {};
}

std::string refusal_of(const KernelChoice& c, std::string_view name) {
  for (const RefusedKernel& r : c.refused)
    if (r.name == name) return r.why;
  return "";
}

struct Case {
  int64_t b, h, hkv, l, s, e;
  bool causal;
};
const Case kCases[] = {
    {2, 8, 2, 17, 17, 64, true},     // odd length, GQA 4:1
    {1, 4, 2, 1, 300, 128, false},   // decode: one query, GQA 2:1
    {1, 4, 4, 100, 100, 128, true},  // no GQA
    {1, 16, 4, 256, 256, 128, true},  // a TP2 Llama layer's prefill shape
    {2, 4, 1, 37, 53, 64, false},    // L != S, odd
    {1, 4, 2, 24, 40, 128, true},    // causal with L < S: PyTorch's top-left diagonal
};

TEST_F(CudaAttention, EachKernelOfTheForwardMatchesCpu) {
  uint64_t seed = 1;
  for (const char* kernel : {"cudnn", "own"}) {
    if (std::string(kernel) == "cudnn" && !need_cudnn()) continue;
    force_kernel(kernel);
    for (DType d : {DType::bf16, DType::f16}) {
      for (const Case& c : kCases) {
        for (bool permuted : {false, true}) {
          auto [q, gq] = input(c.b, c.h, c.l, c.e, d, seed++, permuted);
          auto [k, gk] = input(c.b, c.hkv, c.s, c.e, d, seed++, permuted);
          auto [v, gv] = input(c.b, c.hkv, c.s, c.e, d, seed++, permuted);
          KwArgs kw{{"is_causal", c.causal}, {"enable_gqa", c.h != c.hkv}};
          reset_kernel_choices();
          const std::string what = fmt::format("{} {} b{} h{}/{} l{} s{} e{} causal={} perm={}",
                                               kernel, dtype_name(d), c.b, c.h, c.hkv, c.l, c.s,
                                               c.e, c.causal, permuted);
          expect_close(cpu_t(kFwd, {gq, gk, gv}, kw), cpu_t(kFwd, {q, k, v}, kw), tol(d), what);
          EXPECT_EQ(last_choice(kFwd).chosen, kernel) << what;
        }
      }
    }
  }
}

TEST_F(CudaAttention, EachKernelOfTheBackwardMatchesCpu) {
  uint64_t seed = 100;
  for (const char* kernel : {"cudnn", "own"}) {
    if (std::string(kernel) == "cudnn" && !need_cudnn()) continue;
    force_kernel(kernel);
    for (DType d : {DType::bf16, DType::f16}) {
      for (const Case& c : kCases) {
        const bool permuted = c.l % 2 == 1;
        auto [q, gq] = input(c.b, c.h, c.l, c.e, d, seed++, permuted);
        auto [k, gk] = input(c.b, c.hkv, c.s, c.e, d, seed++, permuted);
        auto [v, gv] = input(c.b, c.hkv, c.s, c.e, d, seed++, false);
        auto [g, gg] = input(c.b, c.h, c.l, c.e, d, seed++, permuted);
        KwArgs kw{{"is_causal", c.causal}, {"enable_gqa", c.h != c.hkv}};
        reset_kernel_choices();
        std::vector<Tensor> want = call(kBwd, {g, q, k, v}, kw).to_tensor_list();
        std::vector<Tensor> got = call(kBwd, {gg, gq, gk, gv}, kw).to_tensor_list();
        ASSERT_EQ(got.size(), 3u);
        const char* names[] = {"dq", "dk", "dv"};
        for (size_t i = 0; i < 3; ++i) {
          expect_close(got[i], want[i], 2 * tol(d),
                       fmt::format("{} {} {} b{} h{}/{} l{} s{} causal={}", names[i], kernel,
                                   dtype_name(d), c.b, c.h, c.hkv, c.l, c.s, c.causal));
        }
        EXPECT_EQ(last_choice(kBwd).chosen, kernel);
      }
    }
  }
}

// Note [cudnn masks]: bool masks broadcast from [L, S] (with a row whose every key is dropped:
// zeros, and zero gradients, as PyTorch) and [B, 1, L, S], a decode's [B, 1, 1, S], and additive
// masks of another dtype ([B, H, L, S] f32 with bf16 q), forward and backward, each kernel.
TEST_F(CudaAttention, EachKernelOfMaskedAttentionMatchesCpu) {
  const int64_t b = 2, h = 4, hkv = 2, e = 64;
  uint64_t seed = 300;
  for (const char* kernel : {"cudnn", "own"}) {
    if (std::string(kernel) == "cudnn" && !need_cudnn()) continue;
    force_kernel(kernel);
    for (DType d : {DType::bf16, DType::f16}) {
      for (int64_t l : {int64_t(1), int64_t(13)}) {
        const int64_t s = l == 1 ? 77 : 29;
        auto [q, gq] = input(b, h, l, e, d, seed++, true);
        auto [k, gk] = input(b, hkv, s, e, d, seed++, true);
        auto [v, gv] = input(b, hkv, s, e, d, seed++, false);
        auto [g, gg] = input(b, h, l, e, d, seed++, false);
        Tensor m2 = Tensor::empty({l, s}, DType::boolean);
        for (int64_t n = 0; n < l * s; ++n) store_double(m2.view(), n, (l == 1 || n / s != l / 2) && n % 3);
        Tensor m4 = Tensor::empty({b, 1, l, s}, DType::boolean);
        for (int64_t n = 0; n < b * l * s; ++n)
          store_double(m4.view(), n, (n % s) <= (n / s) % l + 20);
        Tensor add = random({b, h, l, s}, DType::f32, seed++);
        for (const Tensor& mask : {m2, m4, add}) {
          KwArgs kw{{"enable_gqa", true}};
          const std::string what = fmt::format("{} {} l{} s{} mask {} {}", kernel, dtype_name(d),
                                               l, s, dtype_name(mask.dtype()),
                                               shape_str(mask.shape()));
          reset_kernel_choices();
          expect_close(cpu_t(kFwd, {gq, gk, gv, to_device(mask)}, kw),
                       cpu_t(kFwd, {q, k, v, mask}, kw), tol(d), what);
          EXPECT_EQ(last_choice(kFwd).chosen, kernel) << what;
          std::vector<Tensor> want = call(kBwd, {g, q, k, v, mask}, kw).to_tensor_list();
          std::vector<Tensor> got =
              call(kBwd, {gg, gq, gk, gv, to_device(mask)}, kw).to_tensor_list();
          for (size_t i = 0; i < 3; ++i)
            expect_close(got[i], want[i], 2 * tol(d), fmt::format("grad {} {}", i, what));
          EXPECT_EQ(last_choice(kBwd).chosen, kernel) << what;
        }
      }
    }
  }
}

// What cuDNN does not take runs on the own kernel, and the choice names why.
TEST_F(CudaAttention, FallbacksAreNamed) {
  force_kernel("cudnn");
  auto [q, gq] = input(1, 2, 5, 64, DType::f32, 1, false);
  auto [k, gk] = input(1, 2, 7, 64, DType::f32, 2, false);
  expect_close(cpu_t(kFwd, {gq, gk, gk}), cpu_t(kFwd, {q, k, k}), 1e-5, "f32");
  KernelChoice c = last_choice(kFwd);
  EXPECT_EQ(c.chosen, "own");
  if (cudnn_missing().empty()) {
    EXPECT_EQ(refusal_of(c, "cudnn"), "cuDNN's fused attention takes bf16 and f16 only");
  } else {
    EXPECT_EQ(refusal_of(c, "cudnn"), cudnn_missing());
  }
  // Nothing runs f32 head dims of 6200: the error lists both refusals.
  Tensor huge = to_device(random({1, 1, 1, 6200}, DType::f32, 1));
  try {
    call(kFwd, {huge, huge, huge});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("aten::scaled_dot_product_attention: no cuda kernel runs this call (f32 "
                        "b1 h1/1 l1 s1 e6200/6200"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("; own: head dims 6200 and 6200 need 99204 bytes of shared memory, at "
                        "most 48896 fit"),
              std::string::npos)
        << text;
  }
}

// Unforced: the first call of a shape times both kernels and records the choice on disk; a fresh
// process (reset) reads it back instead of timing again; the search off takes the first.
TEST_F(CudaAttention, ChoiceIsMeasuredAndCachedOnDisk) {
  if (!need_cudnn()) GTEST_SKIP() << "needs two candidates: " << cudnn_missing();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("sf-choice-{}", ::getpid());
  std::filesystem::remove_all(dir);
  ::setenv("SYMMFLOW_CACHE_DIR", dir.c_str(), 1);
  auto [q, gq] = input(1, 8, 128, 128, DType::bf16, 7, true);
  auto [k, gk] = input(1, 2, 128, 128, DType::bf16, 8, true);
  KwArgs kw{{"is_causal", true}, {"enable_gqa", true}};
  Tensor want = cpu_t(kFwd, {q, k, k}, kw);
  expect_close(cpu_t(kFwd, {gq, gk, gk}, kw), want, tol(DType::bf16), "measured");
  KernelChoice c = last_choice(kFwd);
  EXPECT_EQ(c.how, "measured");
  ASSERT_EQ(c.median_us.size(), 2u);
  EXPECT_GT(c.median_us[0].second, 0);
  EXPECT_GT(c.median_us[1].second, 0);
  std::ifstream in(kernel_choice_cache_path());
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << kernel_choice_cache_path();
  EXPECT_NE(line.find(kFwd), std::string::npos) << line;
  EXPECT_NE(line.find("\t" + c.chosen), std::string::npos) << line;
  EXPECT_NE(format_kernel_choices().find("measured; cudnn "), std::string::npos)
      << format_kernel_choices();
  reset_kernel_choices();
  expect_close(cpu_t(kFwd, {gq, gk, gk}, kw), want, tol(DType::bf16), "cached");
  EXPECT_EQ(last_choice(kFwd).how, "cached on disk");
  EXPECT_EQ(last_choice(kFwd).chosen, c.chosen);
  ::unsetenv("SYMMFLOW_CACHE_DIR");
  std::filesystem::remove_all(dir);
}

// A plan's first run captures its steps: the first call of a shape inside a capture builds the
// cuDNN plan and times the kernels on a side stream (RelaxedCapture), and the graph replays to
// the CPU's result, masked (scratch: bias, statistics, workspace as graph allocations) or not.
TEST_F(CudaAttention, FirstCallInsideACaptureMeasuresAndReplays) {
  if (!need_cudnn()) GTEST_SKIP() << "needs two candidates: " << cudnn_missing();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("sf-capture-{}", ::getpid());
  std::filesystem::remove_all(dir);
  ::setenv("SYMMFLOW_CACHE_DIR", dir.c_str(), 1);
  auto [q, gq] = input(2, 8, 96, 128, DType::bf16, 11, true);
  auto [k, gk] = input(2, 2, 96, 128, DType::bf16, 12, true);
  Tensor mask = Tensor::empty({96, 96}, DType::boolean);
  for (int64_t n = 0; n < 96 * 96; ++n) store_double(mask.view(), n, n % 96 <= n / 96);
  Tensor gmask = to_device(mask);
  const OpDef& op = Registry::global().get(kFwd);
  for (bool masked : {false, true}) {
    reset_kernel_choices();
    std::vector<Value> bound = masked ? bind_args(op, {gq, gk, gk, gmask}, {{"enable_gqa", true}})
                                      : bind_args(op, {gq, gk, gk}, {{"is_causal", true},
                                                                     {"enable_gqa", true}});
    std::vector<Value> outputs = {Tensor::empty({2, 8, 96, 128}, DType::bf16, Device::cuda(0))};
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    cudaGraph_t g = nullptr;
    {
      StreamGuard guard(stream);
      CaptureScratch scratch;
      ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      call_bound_into(op, bound, outputs);
      ASSERT_EQ(cudaStreamEndCapture(stream, &g), cudaSuccess);
      EXPECT_EQ(scratch.live(), 0);
    }
    KernelChoice c = last_choice(kFwd);
    EXPECT_EQ(c.how, "measured during capture") << format_kernel_choices();
    EXPECT_EQ(c.median_us.size(), 2u);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
    cudaGraphDestroy(g);
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    }
    cudaGraphExecDestroy(exec);
    cudaStreamDestroy(stream);
    Tensor want = masked ? cpu_t(kFwd, {q, k, k, mask}, {{"enable_gqa", true}})
                         : cpu_t(kFwd, {q, k, k}, {{"is_causal", true}, {"enable_gqa", true}});
    expect_close(outputs[0].to_tensor(), want, tol(DType::bf16),
                 fmt::format("captured, masked={}", masked));
  }
  ::unsetenv("SYMMFLOW_CACHE_DIR");
  std::filesystem::remove_all(dir);
}

// Note [slow candidates stop early]: a candidate whose first timed run is far slower than the
// best before it runs twice (warm-up and that run), not six times; one within reach is timed in
// full. The candidates wait on the host between the timing events, which the events measure.
TEST_F(CudaAttention, ACandidateFarSlowerThanTheBestIsTimedOnce) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("sf-choice-{}", ::getpid());
  ::setenv("SYMMFLOW_CACHE_DIR", dir.c_str(), 1);
  reset_kernel_choices();
  int runs[3] = {0, 0, 0};
  auto waiting = [&](int i, int ms) {
    return [&runs, i, ms] {
      ++runs[i];
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    };
  };
  const std::vector<KernelCandidate> candidates = {
      {"fast", waiting(0, 2)}, {"near", waiting(1, 5)}, {"far", waiting(2, 60)}};
  const std::string key =
      fmt::format("test {}", std::chrono::steady_clock::now().time_since_epoch().count());
  EXPECT_EQ(choose_kernel("test::choice", key, candidates), 0u);
  EXPECT_EQ(runs[0], 6);
  EXPECT_EQ(runs[1], 6);
  EXPECT_EQ(runs[2], 2);
  const KernelChoice c = last_choice("test::choice");
  EXPECT_EQ(c.stopped_early, std::vector<std::string>{"far"});
  ASSERT_EQ(c.median_us.size(), 3u);
  EXPECT_GT(c.median_us[2].second, 8 * c.median_us[0].second);
  EXPECT_NE(format_kernel_choices().find("far"), std::string::npos);
  EXPECT_NE(format_kernel_choices().find("(one run: far slower)"), std::string::npos)
      << format_kernel_choices();
  ::unsetenv("SYMMFLOW_CACHE_DIR");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace symmflow::cuda
