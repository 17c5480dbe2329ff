// What the GPU benches share: SF_CUDA_CHECK (runtime/cuda/check.hpp), CUDA-graph timing, and the
// figure they report (per-sample maximum over the ranks, then the median), the same convention as
// tools/device/graph_timing.py.
#pragma once

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "runtime/cuda/check.hpp"
#include "symmflow/runtime/group.hpp"

namespace symmflow::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Collective over g: the median over samples of the slowest rank's sample.
inline double slowest_rank_median(Group& g, const std::vector<double>& mine) {
  std::string blob(mine.size() * sizeof(double), '\0');
  std::memcpy(blob.data(), mine.data(), blob.size());
  std::vector<double> worst(mine.size(), 0.0);
  for (const std::string& other : g.allgather(blob, "bench")) {
    for (size_t i = 0; i < worst.size(); ++i) {
      double v;
      std::memcpy(&v, other.data() + i * sizeof(double), sizeof v);
      worst[i] = std::max(worst[i], v);
    }
  }
  return median(worst);
}

// Captures `calls` calls of `call` (given the call's index) on stream s into a CUDA graph,
// replays it `warmup` times and then `replays` times, each after `before`, and returns the µs per
// call of every timed replay.
inline std::vector<double> graph_samples(cudaStream_t s, int calls, int replays, int warmup,
                                         const std::function<void(int)>& call,
                                         const std::function<void()>& before = {}) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  SF_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) call(i);
  SF_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  SF_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  SF_CUDA_CHECK(cudaEventCreate(&a));
  SF_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> samples;
  for (int r = -warmup; r < replays; ++r) {
    if (before) before();
    SF_CUDA_CHECK(cudaEventRecord(a, s));
    SF_CUDA_CHECK(cudaGraphLaunch(exec, s));
    SF_CUDA_CHECK(cudaEventRecord(b, s));
    SF_CUDA_CHECK(cudaStreamSynchronize(s));
    float ms = 0;
    SF_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (r >= 0) samples.push_back(double(ms) * 1000.0 / calls);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return samples;
}

// Collective over g: graph_samples with every rank starting each replay together; the median
// per-call time of the slowest rank in µs.
inline double time_graph(Group& g, cudaStream_t s, int calls, int replays, int warmup,
                         const std::function<void()>& call) {
  return slowest_rank_median(
      g, graph_samples(s, calls, replays, warmup, [&](int) { call(); },
                       [&] { g.barrier(0, "bench"); }));
}

}  // namespace symmflow::bench
