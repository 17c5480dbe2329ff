// Tunables: every timeout and threshold of symmflow, in one table with name, default and doc.
// Values come from the environment (SYMMFLOW_<NAME>) once per process; `symmflow env` prints
// the table with the value in force. Code reads them through `tunables()`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace symmflow {

struct Tunables {
  double timeout_s = 30.0;                // every wait (barrier, signal, bootstrap)
  int64_t spin_count = 1024;              // busy polls before a wait starts yielding
  int64_t oversubscribed_spin_count = 0;  // the same when ranks on this host > usable CPUs
  int64_t yield_count = 10000;            // yields before a wait parks or sleeps
  int64_t sleep_us = 50;                  // sleep between polls once backed off
  bool pin_threads = true;                // threads transport: rank r on the r-th CPU (if enough)
  int64_t store_check_ms = 20;            // store transport: poison / dead-peer checks
  int64_t signal_channels = 16;           // channels per signal pad
  int64_t one_shot_max_bytes = 16384;     // all-reduce: one-shot up to here, two-shot above
  int64_t hierarchical_min_bytes = 0;  // spanning all-reduce: hierarchical from here
  int64_t cuda_hierarchical_min_bytes = 0;  // the same on GPUs; 0: never (not yet measured)
  int64_t cuda_one_shot_max_bytes = 4 << 20;  // the same choice on GPUs (cuda.hpp)
  int64_t cuda_threads = 1024;                // threads per block of the GPU collectives
  int64_t cuda_blocks_per_sm = 2;             // most blocks per multiprocessor (two_shot)
  int64_t cuda_skinny_gemm_max_rows = 16;     // bf16/f16 GEMMs this skinny stream the weight
  int64_t collective_matmul_min_bytes = 4 << 20;  // decompose_collective_matmul from this size
  bool cuda_early_launch = true;              // GPU steps start early (Note [early launch])
  bool cuda_pointwise_codegen = true;         // fused regions, plan steps: NVRTC kernels
  bool cuda_skinny_gemm_split = false;        // Note [skinny GEMM split]: k over a cluster
  bool cuda_kernel_search = true;             // Note [measured kernel choice]: time candidates
  bool cuda_cudnn = true;                     // attention may run cuDNN's fused kernels
  bool collective_agreement = true;           // collectives' barriers carry a call signature
  bool debug_collectives = false;             // cross-rank fingerprint check of every collective
  bool rank_agreement = true;                 // ranks agree on plan and inputs (exec/agreement.cpp)
  bool bind_outputs = true;                   // Note [outputs bound in place]
  bool deterministic = false;                 // Note [batch-invariant products]
  bool step_profile = false;                  // Note [step profile]: CPU steps timed per op
};

struct TunableInfo {
  std::string name;  // "timeout_s"
  std::string env;   // "SYMMFLOW_TIMEOUT_S"
  std::string default_value;
  std::string value;  // in force
  std::string doc;
};

// Values in force (environment read on first use). Throws InvalidUsage naming the variable when
// a value does not parse or is out of range.
const Tunables& tunables();
std::vector<TunableInfo> tunable_table();
// Tests and tools may override values for the rest of the process.
void set_tunables(const Tunables& t);

}  // namespace symmflow
