// The copy stream of a rank thread on its GPU, with its events: the collective matmuls
// (collective_matmul.cpp) pull peers' rows on it while the compute stream multiplies, forking from
// and joining the compute stream by its events (so a CUDA graph capture takes both). Made on first
// use, which is refused during a capture: Executable's prepare makes it (exec/cuda/backend.cpp),
// as it makes the cuBLAS handle. Private to the cuda backend.
#pragma once

#include <cuda_runtime_api.h>

#include "runtime/cuda/workspace_device.hpp"

namespace symmflow::cuda {

struct CopyStream {
  int device = -1;
  cudaStream_t stream = nullptr;
  cudaEvent_t events[1 + kMaxRanks] = {};  // [0]: the fork; [1 + k]: the k-th pull done
  cudaEvent_t event(int i) const { return events[i]; }
};

// This rank thread's copy stream on the current GPU.
CopyStream& copy_stream();

}  // namespace symmflow::cuda
