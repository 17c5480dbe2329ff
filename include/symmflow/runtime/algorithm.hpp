// The algorithm each backend runs for a communication op: one table, a function of the op, its
// bytes, the group size and the tunables only, so every rank of a group agrees without talking.
// The backends call it (the cuda Communicator's choice between one_shot and two_shot), and
// `symmflow explain` prints it per collective step. Override through the tunables it names
// (SYMMFLOW_ONE_SHOT_MAX_BYTES, SYMMFLOW_CUDA_ONE_SHOT_MAX_BYTES; `symmflow tunables`).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace symmflow {

// one_shot moves lines of data with their own tags up to this size (Note [cuda all-reduce]).
inline constexpr int64_t kCudaLLMaxBytes = 256 << 10;

struct AlgorithmChoice {
  std::string cpu;   // e.g. "two_shot"
  std::string cuda;  // e.g. "one_shot_ll"
  std::string why;   // the rule that chose them
};

// For a symm_mem op (or its functional form) moving `bytes` (its largest tensor) in a group of
// `world` ranks. Ops that do not communicate get empty names.
AlgorithmChoice collective_algorithm(std::string_view op, int64_t bytes, int world);

// Whether the cuda backend reduces `bytes` in place with two_shot (else one_shot in place).
bool cuda_uses_two_shot(int64_t bytes, int world);

}  // namespace symmflow
