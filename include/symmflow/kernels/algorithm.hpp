// The algorithm each backend runs for a communication op: one rule, a function of the op, its
// bytes, the group size and the tunables only, so every rank of a group agrees without talking.
// The kernels call it (the cuda Communicator picks one_shot, one_shot_ll or two_shot with
// cuda_all_reduce_algorithm), and `symmflow explain` prints collective_algorithm() per collective
// step: there is no second copy of the rule. Override through the tunables it names
// (SYMMFLOW_ONE_SHOT_MAX_BYTES, SYMMFLOW_CUDA_ONE_SHOT_MAX_BYTES; `symmflow env`).
// Compiles without CUDA (the cpu build and explain use it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace symmflow::kernels {

// one_shot moves lines of data with their own tags up to this size (Note [cuda all-reduce]).
inline constexpr int64_t kCudaLLMaxBytes = 256 << 10;

enum class AllReduceAlgorithm {
  copy,         // one rank: the reduction of one value is the value
  one_shot,     // push into every peer's staging, signal, reduce every copy locally
  one_shot_ll,  // the same with data and flag in one 8-byte line (no separate signal)
  two_shot,     // reduce-scatter then all-gather, in place in the symmetric heap
};
std::string_view algorithm_name(AllReduceAlgorithm a);  // "copy", "one_shot", ...

// The cuda all-reduce of `bytes` in a group of `world` ranks. `in_place`: the op reduces its
// symmetric buffer in place (two_shot_all_reduce_*), which may take two_shot (above
// cuda_one_shot_limit(world)); `aligned_8`: input and output are 8-byte aligned (planned
// buffers are 64-byte aligned).
AllReduceAlgorithm cuda_all_reduce_algorithm(int64_t bytes, int world, bool in_place,
                                             bool aligned_8);

// The most bytes an in-place cuda all-reduce of `world` ranks sends by one_shot:
// tunables().cuda_one_shot_max_bytes up to 2 ranks, x 2 / world above (Note [one-shot limit per
// world] in algorithm.cpp).
int64_t cuda_one_shot_limit(int world);

struct AlgorithmChoice {
  std::string cpu;   // e.g. "two_shot"
  std::string cuda;  // e.g. "one_shot_ll in place"
  std::string why;   // the rule that chose them
};

// For the op registered as `op` ("symm_mem::two_shot_all_reduce_"; the namespace may be left
// out) moving `bytes` (its largest tensor) in a group of `world` ranks. Ops that do not
// communicate get empty names.
AlgorithmChoice collective_algorithm(std::string_view op, int64_t bytes, int world);

// Note [hierarchical all-reduce] (kernels/cpu/collectives/spanning.cpp): a group whose members
// run on several hosts. `hosts`: how many; `per_host`: members on each (the largest);
// `uniform`: every host holds the same number.
struct SpanShape {
  int hosts = 1;
  int per_host = 0;
  bool uniform = true;
};
// How a CPU all-reduce of `bytes` on such a group runs: hierarchical (true) or flat through the
// exchange, and why (`why` may be null). The kernel and explain both ask this.
bool hierarchical_all_reduce(int64_t bytes, const SpanShape& span, std::string* why);
// The same for a GPU all-reduce (Note [hierarchical GPU all-reduce] in
// src/kernels/cuda/collectives/spanning.cpp): tunables().cuda_hierarchical_min_bytes (0: never),
// and `bytes` a multiple of 8 x per_host, so that every host member reduces an equal slice.
bool cuda_hierarchical_all_reduce(int64_t bytes, const SpanShape& span, std::string* why);
// collective_algorithm's answer for a group that spans hosts: the CPU algorithm, the GPU refusal,
// and the bytes each level moves per member.
AlgorithmChoice spanning_algorithm(std::string_view op, int64_t bytes, const SpanShape& span);

}  // namespace symmflow::kernels
