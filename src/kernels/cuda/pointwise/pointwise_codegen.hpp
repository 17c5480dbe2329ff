// Pointwise programs compiled to their own kernel at run time (NVRTC), for fused regions: the
// register program interpreter (pointwise.cu) pays a switch per instruction and keeps its
// registers in local memory, which costs 3x once a chain is compute-bound. Note [pointwise
// codegen] in pointwise_codegen.cpp. Private to the cuda backend.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cuda/pointwise/pointwise.hpp"

namespace symmflow::cuda {

// The CUDA C++ source of `p`'s kernel (entry point "pw"): everything but the operands' data
// pointers and the element count is in the text (a strided program's shape and strides too), so
// equal text means one kernel. `vectorized` (a contiguous program whose operands are aligned to
// 4 elements): each thread loads and stores 4 consecutive elements of an operand at once (Note
// [vectorized pointwise] in pointwise_codegen.cpp).
std::string pointwise_source(const PwProgram& p, bool vectorized = false);

// Whether codegen spells every instruction of `p` (every op today, pow with the interpreter's
// special exponents: Note [pow special exponents]); a plan's step that it does not runs
// interpreted.
bool pointwise_compilable(const PwProgram& p);

// Runs `p` through its compiled kernel (compiled and loaded on first use, then cached for the
// process) on `stream`. Raises naming NVRTC's log when the source does not compile.
void launch_compiled_pointwise(const PwProgram& p, void* stream);

// Kernels compiled so far in this process (tests check the cache), and launches of compiled
// kernels (tests check which path a call took, whatever the cache held before).
int compiled_pointwise_kernels();
int64_t compiled_pointwise_launches();

}  // namespace symmflow::cuda
