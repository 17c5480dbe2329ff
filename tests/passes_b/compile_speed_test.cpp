// Speed of the whole compiler (passes::compile) on generated model graphs (bench/model_graph.hpp):
// a 10k-node graph compiles in under a second, and 10x the nodes costs at most 30x the time
// (n log n gives about 12.5x). Times are this thread's CPU time (the compiler is single-threaded,
// so on an idle machine it equals wall time) and the best of a few runs, so other work on the
// machine does not make the test flaky. Unoptimised and sanitizer builds only check that it
// compiles.
#include <time.h>

#include <algorithm>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "bench/model_graph.hpp"
#include "symmflow/passes/pipeline.hpp"

#if defined(SYMMFLOW_ASAN) || defined(SYMMFLOW_TSAN) || !defined(NDEBUG)
#define SYMMFLOW_SLOW_BUILD 1
#endif

namespace symmflow {
namespace {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Best of `runs` compiles of a fresh `nodes`-node model graph, in seconds (building the graph and
// freeing the plan are not timed).
double compile_seconds(size_t nodes, int runs) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    bench::ModelGraphOptions o;
    o.nodes = nodes;
    auto g = bench::model_graph(o);
    double t0 = thread_cpu_seconds();
    auto plan = passes::compile(std::move(g));
    best = std::min(best, thread_cpu_seconds() - t0);
    EXPECT_GT(plan->steps.size(), nodes / 2);  // pointwise chains are fused
  }
  return best;
}

TEST(CompileSpeed, TenThousandNodesUnderOneSecond) {
#ifdef SYMMFLOW_SLOW_BUILD
  fmt::print("10k nodes: {:.3f} s (unoptimised or sanitizer build: not checked)\n",
             compile_seconds(10000, 1));
#else
  double s = compile_seconds(10000, 3);
  fmt::print("10k nodes: {:.3f} s\n", s);
  EXPECT_LT(s, 1.0);
#endif
}

TEST(CompileSpeed, GrowsNoWorseThanNLogN) {
#ifdef SYMMFLOW_SLOW_BUILD
  GTEST_SKIP() << "timing ratio checked in optimised builds only";
#else
  // The two sizes alternate, best of 4 each, so that a busy spell of the machine (ctest runs
  // other tests beside this one) weighs on both alike: measured one after the other, a
  // clean-clone CI read a ratio of 26.5 (2026-11-29) where an idle machine read 17-22. The bound
  // is 2.4 times n log n's 12.5: the 10k graph's data stays in cache and the 100k one's does not,
  // which costs this 2-core machine about 1.5x beside the algorithm; a quadratic pass reads 100.
  double t10k = 1e30, t100k = 1e30;
  for (int round = 0; round < 4; ++round) {
    t10k = std::min(t10k, compile_seconds(10000, 1));
    t100k = std::min(t100k, compile_seconds(100000, 1));
  }
  fmt::print("10k nodes: {:.3f} s, 100k nodes: {:.3f} s, ratio {:.1f} (n log n: 12.5)\n", t10k,
             t100k, t100k / t10k);
  EXPECT_LE(t100k / t10k, 30.0);
#endif
}

}  // namespace
}  // namespace symmflow
