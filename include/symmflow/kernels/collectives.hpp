// C++ entries of the cpu collective kernels, for benchmarks and (later) the executor: the same
// code the symm_mem::* cpu kernels run, without the registry's argument binding.
//
//   symmflow::all_reduce(x, "sum", "tp");   // x symmetric in "tp"; one-shot or two-shot, in place
//
// Every entry is collective over the group (every member calls it, in the same order), validates
// its arguments before any communication, adds in rank order 0..W-1 (bitwise-identical results on
// every rank), and throws symmflow::Error naming the op on bad input, timeout or peer failure.
#pragma once

#include <string_view>

#include "symmflow/core/tensor.hpp"

namespace symmflow {

// In-place all-reduce of a symmetric contiguous tensor: one-shot up to
// tunables().one_shot_max_bytes (reduced into a per-thread scratch, copied back after a barrier),
// two-shot above. reduce_op: sum, avg, max, min.
void all_reduce(const Tensor& symm_input, std::string_view reduce_op, std::string_view group);

// symm_mem::one_shot_all_reduce_out: `out` (any layout, same dtype and shape) gets the reduction
// of every rank's `symm_input`.
void one_shot_all_reduce_out(const Tensor& symm_input, std::string_view reduce_op,
                             std::string_view group, const Tensor& out);

// symm_mem::two_shot_all_reduce_: in place; each rank reduces one slice and writes it to every
// peer.
void two_shot_all_reduce_(const Tensor& symm_input, std::string_view reduce_op,
                          std::string_view group);

}  // namespace symmflow
