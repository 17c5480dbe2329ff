// The 8-layer tensor-parallel MLP of issue 5 (16 tokens, hidden 4096, bf16; per layer
// h = x @ W_l on every rank, then a sum all-reduce of h) assembled by hand from cuBLAS and the
// cuda backend's all-reduce, captured as one CUDA graph and replayed: what the CUDA executor will
// have to reach. Prints the median forward time of the slowest rank (and --json writes it).
// tools/device/torch_mlp.py measures PyTorch on the same shapes in the same device call.
//
//   bench_cuda_mlp [--layers 8] [--tokens 16] [--hidden 4096] [--replays 50] [--json FILE]
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_util.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/core/half.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace {

using namespace symmflow;

#define CHECK_CUBLAS(call) SF_CHECK((call) == CUBLAS_STATUS_SUCCESS, "{} failed", #call)

struct Options {
  int layers = 8, tokens = 16, hidden = 4096, replays = 50;
  std::string json;
};

double run(Runtime& rt, const Options& o) {
  cuda::bind_device();
  auto group = rt.group("world");
  const size_t act = size_t(o.tokens) * size_t(o.hidden) * 2;  // bf16 activations
  const size_t wbytes = size_t(o.hidden) * size_t(o.hidden) * 2;
  auto comm = cuda::Communicator::create(group, act);
  auto heap = cuda::DeviceHeap::allocate(group, 2 * act);  // ping-pong activations, symmetric
  std::vector<void*> weights(size_t(o.layers));
  std::vector<uint16_t> host(size_t(o.hidden) * size_t(o.hidden));
  for (size_t i = 0; i < host.size(); ++i) {
    host[i] = BFloat16(float(int((i * 2654435761u + unsigned(rt.rank())) % 17) - 8) / 256.0f).bits;
  }
  for (void*& w : weights) {
    SF_CUDA_CHECK(cudaMalloc(&w, wbytes));
    SF_CUDA_CHECK(cudaMemcpy(w, host.data(), wbytes, cudaMemcpyHostToDevice));
  }
  char* buf = static_cast<char*>(heap->local());
  std::vector<uint16_t> x(size_t(o.tokens) * size_t(o.hidden), BFloat16(0.01f).bits);
  SF_CUDA_CHECK(cudaMemcpy(buf, x.data(), act, cudaMemcpyHostToDevice));
  cudaStream_t s;
  SF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t blas;
  CHECK_CUBLAS(cublasCreate(&blas));
  CHECK_CUBLAS(cublasSetStream(blas, s));
  void* workspace = nullptr;
  const size_t ws_bytes = 32 << 20;
  SF_CUDA_CHECK(cudaMalloc(&workspace, ws_bytes));
  CHECK_CUBLAS(cublasSetWorkspace(blas, workspace, ws_bytes));
  auto forward = [&] {
    const float one = 1.0f, zero = 0.0f;
    for (int l = 0; l < o.layers; ++l) {
      size_t in_off = size_t(l % 2) * act, out_off = size_t((l + 1) % 2) * act;
      // Row-major [t, h] @ [h, h] as column-major C^T = W^T x^T.
      CHECK_CUBLAS(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, o.hidden, o.tokens, o.hidden, &one,
                                weights[size_t(l)], CUDA_R_16BF, o.hidden, buf + in_off,
                                CUDA_R_16BF, o.hidden, &zero, buf + out_off, CUDA_R_16BF, o.hidden,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      comm->all_reduce_inplace(*heap, out_off, int64_t(o.tokens) * o.hidden, DType::bf16, "sum", s);
    }
  };
  forward();  // cuBLAS picks and loads its kernels outside the capture
  comm->synchronize(s);
  const double us = bench::time_graph(*group, s, 1, o.replays, 5, forward);
  comm->check();  // a collective that timed out on the GPU raises here
  cublasDestroy(blas);
  cudaFree(workspace);
  for (void* w : weights) cudaFree(w);
  cudaStreamDestroy(s);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The 8-layer tensor-parallel MLP by hand: cuBLAS + symmflow all-reduce, one graph"};
  Options o;
  app.add_option("--layers", o.layers);
  app.add_option("--tokens", o.tokens);
  app.add_option("--hidden", o.hidden);
  app.add_option("--replays", o.replays);
  app.add_option("--json", o.json);
  CLI11_PARSE(app, argc, argv);
  try {
    int gpus = std::min(cuda::device_count(), 8);
    if (gpus < 1) {
      std::cerr << "bench_cuda_mlp: no GPU\n";
      return 0;
    }
    double us = 0;
    run_threads(gpus, [&](Runtime& rt) {
      double v = run(rt, o);
      if (rt.rank() == 0) us = v;
    });
    std::cout << fmt::format(
        "mlp {} layers, {} tokens, hidden {}, bf16, {} GPUs: {:.1f} us per "
        "forward (CUDA graph, median of the slowest rank)\n",
        o.layers, o.tokens, o.hidden, gpus, us);
    if (!o.json.empty()) {
      nlohmann::json j = {{"impl", "symmflow_cublas_mlp"}, {"median_us", us}, {"ranks", gpus}};
      std::ofstream(o.json) << j.dump(1) << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_cuda_mlp: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
