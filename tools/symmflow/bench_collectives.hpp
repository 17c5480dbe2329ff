// `symmflow bench collectives`: shared pieces of the command (cmd_bench.cpp), the symmflow
// measurement on any transport (bench_measure.cpp) and the MPI peer run under mpirun
// (bench_mpi_peer.cpp).
//
// Timing convention: every rank times every iteration (a barrier before each sample, f32 data);
// an iteration's time is the slowest rank's, and the reported latency is the median of those over
// the timed iterations, after warm-up. Bus bandwidth follows NCCL's conventions with `bytes` the
// full tensor (the all-reduce buffer, the reduce-scatter input, the all-gather output):
// all-reduce busbw = bytes/t * 2(W-1)/W, reduce-scatter and all-gather busbw = bytes/t * (W-1)/W.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "symmflow/runtime/runtime.hpp"

namespace symmflow::tool::bench {

inline const std::vector<std::string> kOps = {"one_shot", "two_shot", "all_reduce",
                                              "reduce_scatter", "all_gather"};

struct Options {
  int ranks = 2;
  std::string transport = "threads";  // threads, mpi or both
  std::vector<std::string> ops = kOps;
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t(64) << 20;
  int64_t factor = 4;  // sizes: min, min*factor, ... up to max (max included)
  int iters = 20;
  int warmup = 3;
  bool json = false;
};

// One latency measurement: symmflow op on a transport, or an MPI peer (op = peer name).
struct Measurement {
  std::string op;
  int64_t bytes = 0;
  double median_us = 0;
};

// Sizes (bytes of the full tensor) for `op` with `ranks` ranks: reduce-scatter and all-gather
// round up to a multiple of 4 * ranks bytes. Sorted, unique.
std::vector<int64_t> sizes_for(const Options& o, const std::string& op, int ranks);
bool is_all_reduce(const std::string& op);
double busbw_gbps(const std::string& op, int64_t bytes, double median_us, int ranks);
// The MPI call measured as the peer of `op` ("MPI_Allreduce", ...).
std::string peer_of(const std::string& op);
// Median of `samples` (not empty).
double median(std::vector<double> samples);
// Parses "64M", "1K", "8" (binary units K, M, G; optional trailing B).
int64_t parse_bytes(const std::string& text);
std::string format_bytes(int64_t bytes);

using Progress = std::function<void(const std::string& what)>;

// Collective over the world group of the current runtime: every op of o.ops at every size, on
// the transport of `rt`. Returns rank 0's list (others return an empty list). An op that fails
// the same way on every rank (no kernel yet) is skipped and its error is added to `errors`.
std::vector<Measurement> measure_symmflow(Runtime& rt, const Options& o, const Progress& progress,
                                          std::vector<std::string>& errors);

// The child under mpirun (`bench collectives --internal-mpi-peer`): measures the MPI peers of
// o.ops (and symmflow on the mpi transport when o.transport is mpi or both) and prints, on rank
// 0, a JSON object between marker lines (kJsonBegin / kJsonEnd). Returns the exit code.
int run_mpi_peer_child(const Options& o);
inline constexpr const char* kJsonBegin = "@@symmflow-bench-json-begin@@";
inline constexpr const char* kJsonEnd = "@@symmflow-bench-json-end@@";

}  // namespace symmflow::tool::bench
