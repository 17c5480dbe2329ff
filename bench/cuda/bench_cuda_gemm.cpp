// GEMMs of few rows (y[m, n] = x[m, k] @ w[k, n], bf16, f32 accumulation), the per-layer work of
// the issue-5 MLP: the skinny kernel (Note [skinny GEMM]) beside cuBLAS called as matmul.cpp
// calls it (cublasGemmEx, default algorithm) and beside cuBLASLt's best of its top 8 heuristic
// algorithms (each timed, the fastest kept), all in one run on the same buffers. Each figure is
// the median over 20 replays of a CUDA graph of back-to-back GEMMs over distinct weights (at
// least 256 MiB of them, so the L2 cache holds none), per GEMM; GB/s counts the bytes of w, x, y.
// The skinny result is checked against cuBLAS's before timing. early_us: each GEMM started early
// (programmatic dependent launch, Note [early launch]), as a plan starts a GEMM behind a compute
// step; early_w_us: also loading its first stages of w before waiting for the GEMM ahead, as a
// plan does only behind a collective (behind a GEMM, as here, the loads compete with it). The
// early result is checked to be the same bits as the plain launch's.
//
//   bench_cuda_gemm [--json FILE]
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_util.hpp"
#include "kernels/cuda/gemm/skinny_gemm.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/core/half.hpp"
#include "symmflow/runtime/cuda.hpp"

namespace {

using namespace symmflow;

#define CHECK_CUBLAS(call) SF_CHECK((call) == CUBLAS_STATUS_SUCCESS, "{} failed", #call)

struct Shape {
  int64_t m, k, n;
};

struct Row {
  Shape s;
  double cublas_us, lt_us, skinny_us, early_us, early_w_us, max_rel_diff;
  bool early_same = false;
};

// Median µs per call of `calls` calls of `call` captured as one graph on s (20 replays).
double time_graph(cudaStream_t s, int calls, const std::function<void(int)>& call) {
  return bench::median(bench::graph_samples(s, calls, 20, 3, call));
}

struct Gpu {
  cudaStream_t s{};
  cublasHandle_t blas{};
  cublasLtHandle_t lt{};
  void* workspace = nullptr;
  static constexpr size_t kWorkspace = 32 << 20;
  Gpu() {
    SF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK_CUBLAS(cublasCreate(&blas));
    CHECK_CUBLAS(cublasLtCreate(&lt));
    SF_CUDA_CHECK(cudaMalloc(&workspace, kWorkspace));
    CHECK_CUBLAS(cublasSetStream(blas, s));
    CHECK_CUBLAS(cublasSetWorkspace(blas, workspace, kWorkspace));
  }
  ~Gpu() {
    cublasLtDestroy(lt);
    cublasDestroy(blas);
    cudaFree(workspace);
    cudaStreamDestroy(s);
  }
};

// cuBLASLt's best of its top 8 algorithms for this shape, each timed over the same calls.
double time_lt(Gpu& gpu, const Shape& sh, int calls, const std::function<const void*(int)>& w,
               const void* x, void* y) {
  cublasLtMatmulDesc_t op;
  CHECK_CUBLAS(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatrixLayout_t la, lb, lc;  // column-major: y^T (n x m) = w^T (n x k) @ x^T (k x m)
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, uint64_t(sh.n), uint64_t(sh.k), sh.n));
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, uint64_t(sh.k), uint64_t(sh.m), sh.k));
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, uint64_t(sh.n), uint64_t(sh.m), sh.n));
  cublasLtMatmulPreference_t pref;
  CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = Gpu::kWorkspace;
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t found[8];
  int count = 0;
  CHECK_CUBLAS(cublasLtMatmulAlgoGetHeuristic(gpu.lt, op, la, lb, lc, lc, pref, 8, found, &count));
  double best = 1e30;
  const float one = 1, zero = 0;
  for (int i = 0; i < count; ++i) {
    auto call = [&](int c) {
      CHECK_CUBLAS(cublasLtMatmul(gpu.lt, op, &one, w(c), la, x, lb, &zero, y, lc, y, lc,
                                  &found[i].algo, gpu.workspace, Gpu::kWorkspace, gpu.s));
    };
    call(0);  // loads the kernel outside the capture
    SF_CUDA_CHECK(cudaStreamSynchronize(gpu.s));
    best = std::min(best, time_graph(gpu.s, calls, call));
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  return best;
}

std::vector<float> to_floats(const void* dev, int64_t count) {
  std::vector<uint16_t> bits(size_t(count), 0);
  SF_CUDA_CHECK(cudaMemcpy(bits.data(), dev, bits.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out;
  for (uint16_t b : bits) out.push_back(float(BFloat16::from_bits(b)));
  return out;
}

Row measure(Gpu& gpu, const Shape& sh) {
  const size_t wbytes = size_t(sh.k * sh.n) * 2;
  const int calls = int(std::clamp<size_t>((size_t(256) << 20) / wbytes + 1, 8, 64));
  std::vector<uint16_t> host(size_t(sh.k * sh.n));
  for (size_t i = 0; i < host.size(); ++i)
    host[i] = BFloat16(float(int((i * 2654435761u) % 17) - 8) / 64.0f).bits;
  std::vector<void*> ws(static_cast<size_t>(calls));
  for (void*& w : ws) {
    SF_CUDA_CHECK(cudaMalloc(&w, wbytes));
    SF_CUDA_CHECK(cudaMemcpy(w, host.data(), wbytes, cudaMemcpyHostToDevice));
  }
  std::vector<uint16_t> xh(size_t(sh.m * sh.k));
  for (size_t i = 0; i < xh.size(); ++i)
    xh[i] = BFloat16(float(int((i * 40503u) % 13) - 6) / 8.0f).bits;
  void *x, *y, *y_ref;
  SF_CUDA_CHECK(cudaMalloc(&x, xh.size() * 2));
  SF_CUDA_CHECK(cudaMalloc(&y, size_t(sh.m * sh.n) * 2));
  SF_CUDA_CHECK(cudaMalloc(&y_ref, size_t(sh.m * sh.n) * 2));
  SF_CUDA_CHECK(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
  auto w = [&](int c) -> const void* { return ws[size_t(c)]; };
  const float one = 1, zero = 0;
  auto cublas = [&](int c, void* out) {
    CHECK_CUBLAS(cublasGemmEx(gpu.blas, CUBLAS_OP_N, CUBLAS_OP_N, int(sh.n), int(sh.m), int(sh.k),
                              &one, w(c), CUDA_R_16BF, int(sh.n), x, CUDA_R_16BF, int(sh.k), &zero,
                              out, CUDA_R_16BF, int(sh.n), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
  };
  auto launch = [&](int c, bool early, bool w_stable = true) {
    cuda::SkinnyGemm g{x, w(c), y, sh.m, sh.n, sh.k, sh.k, sh.n, sh.n};
    g.early = early;
    g.w_stable = w_stable;
    SF_CUDA_CHECK(cudaError_t(cuda::launch_skinny_gemm(g, gpu.s)));
  };
  auto skinny = [&](int c) { launch(c, false); };
  auto early_w = [&](int c) { launch(c, true); };
  cublas(0, y_ref);
  skinny(0);
  SF_CUDA_CHECK(cudaStreamSynchronize(gpu.s));
  std::vector<float> got = to_floats(y, sh.m * sh.n), want = to_floats(y_ref, sh.m * sh.n);
  SF_CUDA_CHECK(cudaMemset(y, 0, size_t(sh.m * sh.n) * 2));
  cublas(1, y_ref);  // the early launch follows a kernel, as in a plan
  early_w(0);
  SF_CUDA_CHECK(cudaStreamSynchronize(gpu.s));
  const bool early_same = to_floats(y, sh.m * sh.n) == got;
  double diff = 0;
  for (size_t i = 0; i < got.size(); ++i)
    diff = std::max(diff, double(std::abs(got[i] - want[i])) / std::max(1.0f, std::abs(want[i])));
  Row row{sh, 0, 0, 0, 0, 0, diff, early_same};
  row.cublas_us = time_graph(gpu.s, calls, [&](int c) { cublas(c, y); });
  row.lt_us = time_lt(gpu, sh, calls, w, x, y);
  row.skinny_us = time_graph(gpu.s, calls, skinny);
  row.early_us = time_graph(gpu.s, calls, [&](int c) { launch(c, true, false); });
  row.early_w_us = time_graph(gpu.s, calls, early_w);
  for (void* p : ws) cudaFree(p);
  cudaFree(x);
  cudaFree(y);
  cudaFree(y_ref);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Skinny bf16 GEMMs: symmflow's streaming kernel beside cuBLAS and cuBLASLt"};
  std::string json;
  app.add_option("--json", json);
  CLI11_PARSE(app, argc, argv);
  try {
    if (cuda::device_count() < 1) {
      std::cerr << "bench_cuda_gemm: no GPU\n";
      return 0;
    }
    cuda::bind_device();
    Gpu gpu;
    const std::vector<Shape> shapes = {
        {16, 4096, 4096},  {8, 4096, 4096},   {1, 4096, 4096},  {16, 4096, 1024}, {16, 1024, 4096},
        {16, 4096, 14336}, {16, 14336, 4096}, {16, 8192, 8192}, {4, 4096, 512},   {13, 2056, 1000}};
    nlohmann::json out = nlohmann::json::array();
    bool failed = false;
    int sms = 0;
    SF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    std::cout << fmt::format(
        "{:>4} {:>6} {:>6} {:>10} {:>10} {:>10} {:>7} {:>8} {:>9} {:>9} {:>9} {:>6} {:>8}\n", "m",
        "k", "n", "cublas_us", "lt_best_us", "skinny_us", "ratio", "GB/s", "max_diff", "early_us",
        "early_w_us", "same", "mm_takes");
    for (const Shape& sh : shapes) {
      Row r = measure(gpu, sh);
      const double best_peer = std::min(r.cublas_us, r.lt_us);
      const double bytes = double(sh.k * sh.n + sh.m * sh.k + sh.m * sh.n) * 2;
      // Aligned operands: only the shape decides.
      cuda::SkinnyGemm g{gpu.workspace, gpu.workspace, nullptr, sh.m, sh.n, sh.k, sh.k, sh.n, sh.n};
      const int split = cuda::skinny_gemm_split_in_force(g, sms);
      const std::string takes =
          split == 0 ? "cublas" : split == 1 ? "skinny" : fmt::format("skinny/{}", split);
      std::cout << fmt::format(
          "{:>4} {:>6} {:>6} {:>10.2f} {:>10.2f} {:>10.2f} {:>7.2f} {:>8.0f} {:>9.1e} {:>9.2f} "
          "{:>9.2f} {:>6} {:>8}\n",
          sh.m, sh.k, sh.n, r.cublas_us, r.lt_us, r.skinny_us, best_peer / r.skinny_us,
          bytes / r.skinny_us / 1e3, r.max_rel_diff, r.early_us, r.early_w_us,
          r.early_same ? "yes" : "NO", takes);
      if (!r.early_same) failed = true;
      out.push_back({{"m", sh.m},
                     {"k", sh.k},
                     {"n", sh.n},
                     {"cublas_us", r.cublas_us},
                     {"cublaslt_best_us", r.lt_us},
                     {"skinny_us", r.skinny_us},
                     {"early_us", r.early_us},
                     {"early_w_us", r.early_w_us},
                     {"early_same_bits", r.early_same},
                     {"ratio", best_peer / r.skinny_us},
                     {"max_rel_diff", r.max_rel_diff},
                     {"mm_takes", takes}});
    }
    std::cout << fmt::format(
        "ratio = best of cuBLAS and cuBLASLt / skinny (above 1: the skinny kernel is faster); "
        "early_us: started early (programmatic dependent launch); early_w_us: also loading w "
        "before waiting for the GEMM ahead; same: same bits as the plain launch; mm_takes: what "
        "aten::mm runs on this GPU ({} multiprocessors)\n",
        sms);
    if (!json.empty()) std::ofstream(json) << out.dump(1) << "\n";
    if (failed) {
      std::cerr << "bench_cuda_gemm: an early launch gave other bits than the plain one\n";
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_cuda_gemm: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
