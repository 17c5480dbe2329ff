// The front door, part 5: the collective benchmark behind `symmflow bench collectives`
// (tools/symmflow/cmd_bench.cpp prints it): symmflow's collectives measured on the threads or the
// mpi transport (src/api/bench_measure.cpp) and the MPI peers measured under mpirun
// (src/api/bench_mpi_peer.cpp).
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


namespace symmflow::api::bench {

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

// Every op of o.ops at every size on o.ranks rank threads of this process (threads transport):
// rank 0's list. An op that fails the same way on every rank (no kernel yet) is skipped and its
// error is added to `errors`. `progress` (may be empty) is called before each measurement.
std::vector<Measurement> measure_threads(const Options& o, const Progress& progress,
                                         std::vector<std::string>& errors);

// What the child under mpirun measured: the MPI peers, symmflow on the mpi transport (when
// o.transport is mpi or both) and the ops it skipped.
struct MpiMeasurements {
  std::vector<Measurement> peers, symmflow;
  std::vector<std::string> errors;
};
// Runs `mpirun -np o.ranks <child_command> --transport ... --ops ...` (child_command: the program
// and the arguments that make it call run_mpi_peer_child, e.g. {"/path/symmflow", "bench",
// "collectives", "--internal-mpi-peer"}) and reads what it printed. InvalidUsage with the
// command and its output when it fails.
MpiMeasurements measure_under_mpirun(const Options& o, const std::vector<std::string>& child_command);
// This program's path (/proc/self/exe).
std::string self_path();

// The child under mpirun (`bench collectives --internal-mpi-peer`): measures the MPI peers of
// o.ops (and symmflow on the mpi transport when o.transport is mpi or both) and prints, on rank
// 0, a JSON object between marker lines (kJsonBegin / kJsonEnd). Returns the exit code.
int run_mpi_peer_child(const Options& o);
inline constexpr const char* kJsonBegin = "@@symmflow-bench-json-begin@@";
inline constexpr const char* kJsonEnd = "@@symmflow-bench-json-end@@";

}  // namespace symmflow::api::bench
