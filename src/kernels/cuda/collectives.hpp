// Launchers of the cuda collective kernels (all_reduce.cu), callable from host code without CUDA
// headers; they return the cudaError_t of the launch as an int (0: success). The .cu files include
// nothing of symmflow but this header and workspace_device.hpp. Private to the cuda backend.
#pragma once

#include <cstdint>

#include "runtime/cuda/workspace_device.hpp"

namespace symmflow::cuda {

enum class ReduceKind { sum, avg, max, min };
enum class ElemType { f32, bf16, f16 };

// Launch shape of one call: the same on every rank for the same call (a function of the size).
struct Launch {
  int blocks = 1;
  int threads = 512;
  bool vec = false;  // 16-byte loads and stores (sizes and addresses allow it)
};

// Loads every collective kernel on the current GPU now rather than at its first launch (a lazy
// load may wait for a peer's spinning kernel on a shared GPU: Note [ranks sharing a GPU]).
int preload_collective_kernels();

// out = reduce(in of every rank); see Note [cuda all-reduce] in all_reduce.cu.
int launch_one_shot(const WorkspaceView& v, const void* in, void* out, int64_t n, ElemType type,
                    ReduceKind op, const Launch& l, void* stream);
// The same with the data carrying its flag (n * size multiple of 8, in and out 8-byte aligned,
// at most kLLMaxBytes).
int launch_one_shot_ll(const WorkspaceView& v, const void* in, void* out, int64_t n, ElemType type,
                       ReduceKind op, const Launch& l, void* stream);
// v.data[r] reduced in place (n elements); see the same note.
int launch_two_shot(const WorkspaceView& v, int64_t n, ElemType type, ReduceKind op,
                    const Launch& l, void* stream);

}  // namespace symmflow::cuda
