// What the GPU benches share: SF_CUDA_CHECK (runtime/cuda/check.hpp), and the figure they report
// (per-sample maximum over the ranks, then the median), the same convention as
// tools/device/graph_timing.py.
#pragma once

#include <algorithm>
#include <cstring>
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

}  // namespace symmflow::bench
