// The choice behind the GPU pointwise kernels, measured (issue 5: "templates or NVRTC or ...,
// your choice, measured"): the chain y = sin((x * 2 + 1) * x) on f32, as
//   unfused   four eager aten calls (four kernels, four passes over memory, fresh outputs),
//   program   the fused region fuse_pointwise makes, run by the register-program engine (one
//             kernel for every program: Note [pointwise programs] in kernels/cuda/pointwise/pointwise.cu),
//   compiled  the same region as its own kernel generated and compiled at run time (NVRTC, Note
//             [pointwise codegen]): what the executor runs by default,
//   by hand   the same chain compiled as its own kernel (what NVRTC or a template would give).
// Median over 20 samples of 20 back-to-back calls each, timed with CUDA events; prints a table
// and the ratios program / by hand, compiled / by hand and unfused / compiled.
#include <cstdio>
#include <vector>

#include <cuda_runtime_api.h>

#include "bench_util.hpp"
#include "exec/cuda/fused.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/runtime/tunables.hpp"

int launch_reference_chain(const float* x, float* y, int64_t n, void* stream);

namespace {

using namespace symmflow;

constexpr const char* kChain = R"(graph chain(x: f32[N]) {
  a = aten::mul.Scalar(x, 2.0)
  b = aten::add.Scalar(a, 1.0)
  c = aten::mul.Tensor(b, x)
  y = aten::sin(c)
  return y
}
)";

// Median µs per call of `calls` back-to-back calls of f on the current stream.
double time_us(const std::function<void()>& f) {
  auto s = static_cast<cudaStream_t>(cuda::current_stream());
  cudaEvent_t a, b;
  SF_CUDA_CHECK(cudaEventCreate(&a));
  SF_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i) f();
  std::vector<double> samples;
  for (int k = 0; k < 20; ++k) {
    SF_CUDA_CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < 20; ++i) f();
    SF_CUDA_CHECK(cudaEventRecord(b, s));
    SF_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    SF_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    samples.push_back(double(ms) * 1000.0 / 20);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return bench::median(samples);
}

}  // namespace

int main() {
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_cuda_pointwise: no GPU\n");
    return 77;
  }
  run_threads(1, [](Runtime&) {
    cuda::bind_device();
    std::printf("%-10s %11s %11s %11s %11s %10s %10s %10s %12s\n", "elements", "unfused_us",
                "program_us", "compiled_us", "by_hand_us", "prog/hand", "comp/hand", "unf/comp",
                "compiled_GB/s");
    for (int64_t n : {int64_t(1) << 16, int64_t(1) << 20, int64_t(1) << 24}) {
      std::string text = kChain;
      text.replace(text.find("N]"), 1, std::to_string(n));
      auto plan = passes::compile(ir::parse_graph(text));
      const ir::Graph* body = nullptr;
      for (const passes::PlanStep& step : plan->steps) {
        const ir::Node* node = step.node;
        if (node->kind() == ir::NodeKind::fused) body = node->body();
      }
      SF_CHECK(body, "bench_cuda_pointwise: fuse_pointwise made no fused region");
      Tensor x = cuda::to_device(Tensor::full({n}, DType::f32, 0.5));
      Tensor y = Tensor::empty({n}, DType::f32, x.device());
      const double unfused = time_us([&] {
        Tensor a = call("aten::mul.Scalar", {x, 2.0}).to_tensor();
        Tensor b = call("aten::add.Scalar", {a, 1.0}).to_tensor();
        Tensor c = call("aten::mul.Tensor", {b, x}).to_tensor();
        call("aten::sin.out", {c}, {{"out", y}});
      });
      const Tensor in[] = {x}, out[] = {y};
      auto fused_with = [&](bool codegen) {
        Tunables saved = tunables(), t = saved;
        t.cuda_pointwise_codegen = codegen;
        set_tunables(t);
        const double us = time_us([&] { cuda::run_fused(*body, in, out); });
        set_tunables(saved);
        return us;
      };
      const double program = fused_with(false), compiled = fused_with(true);
      const double by_hand = time_us([&] {
        SF_CUDA_CHECK(cudaError_t(launch_reference_chain(static_cast<const float*>(x.raw_data()),
                                                         static_cast<float*>(y.raw_data()), n,
                                                         cuda::current_stream())));
      });
      std::printf("%-10lld %11.2f %11.2f %11.2f %11.2f %10.2f %10.2f %10.2f %12.1f\n",
                  (long long)n, unfused, program, compiled, by_hand, program / by_hand,
                  compiled / by_hand, unfused / compiled, double(n) * 8 / compiled / 1e3);
    }
  });
  return 0;
}
