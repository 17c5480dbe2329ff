// Latency and bandwidth of the cpu collectives on threads (2 ranks by default).
//
//   bench_collectives_micro [ranks] [iters]
//
// For each size it runs, on every rank, `iters` calls in batches of 32 and prints rank 0's median
// per-call time of: one-shot into an out tensor (C++ entry), symmflow::all_reduce in place (the
// C++ entry the compiler uses), one_shot_all_reduce_out through the registry (symmflow::call),
// and, as the peer measured in the same run, a bare two-barrier round trip (the synchronisation
// floor every one-shot pays) with the ratio. Large sizes also print the effective bandwidth
// (bytes read from all ranks per second). Plain main(): no Google Benchmark needed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "symmflow/kernels/collectives.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/runtime/heap.hpp"
#include "symmflow/runtime/runtime.hpp"

using namespace symmflow;

namespace {

using Clock = std::chrono::steady_clock;

// Median per-call ns over batches; every rank runs the same calls, rank 0 records.
double median_ns(Runtime& rt, int iters, const std::function<void()>& fn) {
  constexpr int kBatch = 32;
  for (int i = 0; i < 64; ++i) fn();  // warm up
  std::vector<double> samples;
  for (int b = 0; b < std::max(1, iters / kBatch); ++b) {
    auto t0 = Clock::now();
    for (int i = 0; i < kBatch; ++i) fn();
    samples.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / kBatch);
  }
  std::nth_element(samples.begin(), samples.begin() + long(samples.size() / 2), samples.end());
  (void)rt;
  return samples[samples.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = argc > 1 ? std::atoi(argv[1]) : 2;
  int iters = argc > 2 ? std::atoi(argv[2]) : 20000;
  std::vector<int64_t> sizes = {8, 64, 256, 1024, 4096, 65536, 1 << 20, 16 << 20};
  // Run the op registrations once on this thread before the ranks race to look ops up (see the
  // report: run_pending_libraries clears its flag before it has registered the batch).
  Registry::global();
  std::printf("ranks=%d f32 sum; median ns per call (rank 0)\n", ranks);
  std::printf("%10s %12s %12s %12s %12s %8s %10s\n", "bytes", "oneshot_out", "all_reduce",
              "via_call", "2x_barrier", "ratio", "GB/s");
  run_threads(ranks, [&](Runtime& rt) {
    Group& g = *rt.group("world");
    for (int64_t bytes : sizes) {
      int64_t n = bytes / 4;
      int it = bytes >= (1 << 20) ? std::max(64, iters / 400) : iters;
      Tensor in = empty_symmetric({n}, DType::f32, "world");
      Tensor out = Tensor::empty({n}, DType::f32);
      float* p = in.data<float>();
      for (int64_t i = 0; i < n; ++i) p[i] = float(i % 7);
      double oneshot = median_ns(rt, it, [&] { one_shot_all_reduce_out(in, "sum", "world", out); });
      double inplace = median_ns(rt, it, [&] {
        for (int64_t i = 0; i < std::min<int64_t>(n, 1); ++i) p[i] = 1.0f;
        all_reduce(in, "sum", "world");
      });
      double via_call = median_ns(rt, bytes >= (1 << 20) ? it : it / 4, [&] {
        call("symm_mem::one_shot_all_reduce_out", {in, "sum", "world", out});
      });
      double floor = median_ns(rt, it, [&] {
        g.barrier(0, "bench");
        g.barrier(0, "bench");
      });
      if (rt.rank() == 0) {
        double gbs = double(bytes) * ranks / oneshot;  // bytes read per ns = GB/s
        std::printf("%10lld %12.0f %12.0f %12.0f %12.0f %8.2f %10.2f\n", (long long)bytes, oneshot,
                    inplace, via_call, floor, oneshot / floor, gbs);
        std::fflush(stdout);
      }
    }
  });
  return 0;
}
