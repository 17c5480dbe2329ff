// Compute benchmarks of the aten CPU kernels, each beside a peer measured in the same binary:
//  - aten::mm f32 (square n = 64, 256, 512) through symmflow::call (OpenBLAS) vs a naive
//    i-k-j triple loop; counter FLOPS = 2 n^3 per iteration.
//  - aten::add.Tensor f32 (1 Mi - 16 Mi elements, fresh output each call, as eager execution does)
//    and add.out (preallocated out) vs memcpy of the same bytes (2 reads + 1 write for add, 1 read
//    + 1 write for memcpy); counter bytes_per_second counts the bytes each one moves.
// BLAS thread counts are left as the environment sets them (OPENBLAS_NUM_THREADS).
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "symmflow/ops/call.hpp"

namespace {

using symmflow::DType;
using symmflow::Tensor;

Tensor random_f32(const symmflow::Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

void set_flops(benchmark::State& state, int64_t n) {
  state.counters["FLOPS"] = benchmark::Counter(2.0 * double(n) * double(n) * double(n),
                                               benchmark::Counter::kIsIterationInvariantRate);
}

void BM_mm_symmflow(benchmark::State& state) {
  int64_t n = state.range(0);
  Tensor a = random_f32({n, n}, 1), b = random_f32({n, n}, 2);
  for (auto _ : state) {
    Tensor c = symmflow::call("aten::mm", {a, b}).to_tensor();
    benchmark::DoNotOptimize(c.raw_data());
  }
  set_flops(state, n);
}

void BM_mm_naive(benchmark::State& state) {
  int64_t n = state.range(0);
  Tensor a = random_f32({n, n}, 1), b = random_f32({n, n}, 2);
  std::vector<float> c(size_t(n * n));
  const float* ap = a.data<float>();
  const float* bp = b.data<float>();
  for (auto _ : state) {
    std::fill(c.begin(), c.end(), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < n; ++k) {
        float aik = ap[i * n + k];
        for (int64_t j = 0; j < n; ++j) c[size_t(i * n + j)] += aik * bp[k * n + j];
      }
    }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, n);
}

void BM_add_symmflow(benchmark::State& state) {
  int64_t n = state.range(0);
  Tensor a = random_f32({n}, 1), b = random_f32({n}, 2);
  for (auto _ : state) {
    Tensor c = symmflow::call("aten::add.Tensor", {a, b}).to_tensor();
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * n * 3 * int64_t(sizeof(float)));
}

void BM_add_out_symmflow(benchmark::State& state) {
  int64_t n = state.range(0);
  Tensor a = random_f32({n}, 1), b = random_f32({n}, 2), out = Tensor::empty({n}, DType::f32);
  for (auto _ : state) {
    symmflow::call("aten::add.out", {a, b}, {{"out", out}});
    benchmark::DoNotOptimize(out.raw_data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * n * 3 * int64_t(sizeof(float)));
}

void BM_memcpy(benchmark::State& state) {
  int64_t n = state.range(0);
  Tensor a = random_f32({n}, 1), out = Tensor::empty({n}, DType::f32);
  for (auto _ : state) {
    std::memcpy(out.raw_data(), a.raw_data(), size_t(n) * sizeof(float));
    benchmark::DoNotOptimize(out.raw_data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * n * 2 * int64_t(sizeof(float)));
}

BENCHMARK(BM_mm_symmflow)->Arg(64)->Arg(256)->Arg(512)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mm_naive)->Arg(64)->Arg(256)->Arg(512)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_add_symmflow)->Arg(1 << 20)->Arg(1 << 22)->Arg(1 << 24)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_add_out_symmflow)->Arg(1 << 20)->Arg(1 << 22)->Arg(1 << 24)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_memcpy)->Arg(1 << 20)->Arg(1 << 22)->Arg(1 << 24)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
