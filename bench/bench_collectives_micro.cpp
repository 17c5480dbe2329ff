// Latency and bandwidth of the cpu collectives, on threads (2 ranks by default) or processes.
//
//   bench_collectives_micro [ranks] [iters]                       # threads
//   mpirun -np 8 bench_collectives_micro - [iters]                # mpi processes
//   SYMMFLOW_STORE=file:/tmp/d RANK=r WORLD_SIZE=8 bench_collectives_micro - [iters]  # store
//
// For each size it runs, on every rank, `iters` calls in batches of 32 and prints rank 0's median
// per-call time of: one-shot into an out tensor (C++ entry), the same with the collective
// agreement check off (Note [collective agreement] in src/runtime/agreement.cpp; the peer of the
// "agree" column, which is on - off), symmflow::all_reduce in place (the C++ entry the compiler
// uses), one_shot_all_reduce_out through the registry (symmflow::call), and, as the peer measured
// in the same run, a bare two-barrier round trip (the synchronisation floor every one-shot pays)
// with the ratio. On and off alternate batch by batch, and which of them goes first alternates
// too (a fixed order showed +114 ns at 64 B that the other order did not), so load on the
// machine and the order hit both alike.
// Large sizes also print the effective bandwidth (bytes read from all ranks per second). Plain
// main(): no Google Benchmark needed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "symmflow/kernels/collectives.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/runtime/heap.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/runtime/tunables.hpp"

using namespace symmflow;

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBatch = 32;
constexpr int kChannel = 1;  // the bench's own barriers, apart from the kernels' channel 0

double batch_ns(const std::function<void()>& fn) {
  auto t0 = Clock::now();
  for (int i = 0; i < kBatch; ++i) fn();
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / kBatch;
}

double median(std::vector<double> s) {
  std::nth_element(s.begin(), s.begin() + long(s.size() / 2), s.end());
  return s[s.size() / 2];
}

// Median per-call ns over batches; every rank runs the same calls, rank 0 records.
double median_ns(int iters, const std::function<void()>& fn) {
  for (int i = 0; i < 64; ++i) fn();  // warm up
  std::vector<double> samples;
  for (int b = 0; b < std::max(1, iters / kBatch); ++b) samples.push_back(batch_ns(fn));
  return median(samples);
}

// Sets collective_agreement on every rank at the same point: between two plain barriers, so no
// rank's collective meets a peer's with the other setting. Threads share one table (rank 0 sets
// it); each process sets its own.
void set_agreement(Runtime& rt, bool on) {
  Group& g = *rt.group("world");
  g.barrier(kChannel, "bench: agreement");
  if (rt.bootstrap().transport() != Transport::threads || rt.rank() == 0) {
    Tunables t = tunables();
    t.collective_agreement = on;
    set_tunables(t);
  }
  g.barrier(kChannel, "bench: agreement");
}

// Medians of fn with the agreement check on and off, batches alternating.
std::pair<double, double> on_off_ns(Runtime& rt, int iters, const std::function<void()>& fn) {
  for (int i = 0; i < 64; ++i) fn();
  std::vector<double> on, off;
  for (int b = 0; b < std::max(1, iters / kBatch); ++b) {
    for (bool check : {b % 2 == 0, b % 2 != 0}) {  // which goes first alternates too
      set_agreement(rt, check);
      (check ? on : off).push_back(batch_ns(fn));
    }
  }
  set_agreement(rt, true);
  return {median(on), median(off)};
}

void bench(Runtime& rt, int iters) {
  const int ranks = rt.world_size();
  std::vector<int64_t> sizes = {8, 64, 256, 1024, 4096, 65536, 1 << 20, 16 << 20};
  Group& g = *rt.group("world");
  if (rt.rank() == 0) {
    std::printf("ranks=%d transport=%s f32 sum; median ns per call (rank 0)\n", ranks,
                rt.bootstrap().transport_name());
    std::printf("%10s %12s %12s %8s %12s %12s %12s %8s %10s\n", "bytes", "oneshot_out",
                "agree_off", "agree", "all_reduce", "via_call", "2x_barrier", "ratio", "GB/s");
  }
  for (int64_t bytes : sizes) {
    int64_t n = bytes / 4;
    int it = bytes >= (1 << 20) ? std::max(64, iters / 400) : iters;
    Tensor in = empty_symmetric({n}, DType::f32, "world");
    Tensor out = Tensor::empty({n}, DType::f32);
    float* p = in.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = float(i % 7);
    auto [oneshot, off] =
        on_off_ns(rt, it, [&] { one_shot_all_reduce_out(in, "sum", "world", out); });
    double inplace = median_ns(it, [&] {
      for (int64_t i = 0; i < std::min<int64_t>(n, 1); ++i) p[i] = 1.0f;
      all_reduce(in, "sum", "world");
    });
    double via_call = median_ns(bytes >= (1 << 20) ? it : it / 4, [&] {
      call("symm_mem::one_shot_all_reduce_out", {in, "sum", "world", out});
    });
    double floor = median_ns(it, [&] {
      g.barrier(0, "bench");
      g.barrier(0, "bench");
    });
    if (rt.rank() == 0) {
      double gbs = double(bytes) * ranks / oneshot;  // bytes read per ns = GB/s
      std::printf("%10lld %12.0f %12.0f %+8.0f %12.0f %12.0f %12.0f %8.2f %10.2f\n",
                  (long long)bytes, oneshot, off, oneshot - off, inplace, via_call, floor,
                  oneshot / floor, gbs);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool processes = argc > 1 && std::strcmp(argv[1], "-") == 0;
  int ranks = argc > 1 && !processes ? std::atoi(argv[1]) : 2;
  int iters = argc > 2 ? std::atoi(argv[2]) : 20000;
  // Run the op registrations once on this thread before the ranks race to look ops up (see the
  // report: run_pending_libraries clears its flag before it has registered the batch).
  Registry::global();
  if (!processes) {
    run_threads(ranks, [&](Runtime& rt) { bench(rt, iters); });
    return 0;
  }
  Runtime& rt = std::getenv("SYMMFLOW_STORE") ? init_store_from_env() : init_mpi(&argc, &argv);
  bench(rt, iters);
  rt.group("world")->barrier(kChannel, "bench: done");
  return 0;
}
