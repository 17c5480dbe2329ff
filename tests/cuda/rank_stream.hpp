// Each rank thread's own non-blocking stream, for GPU tests whose rank threads may share one GPU
// (Note [ranks sharing a GPU] in src/runtime/cuda/heap.cpp): on the legacy default stream, one
// rank's kernel waiting for its peer's signal would hold the peer's kernel back behind it, and
// the wait would time out. Copies go on the same stream and are waited for.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace symmflow::cuda::testing {

// Made on first use in each thread, never destroyed (a test's threads are few).
inline void* rank_stream() {
  thread_local cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) s = nullptr;
    return s;
  }();
  return stream;
}

// A copy or fill on this rank's stream, finished when it returns.
inline cudaError_t copy_on_rank_stream(void* dst, const void* src, size_t bytes,
                                       cudaMemcpyKind kind) {
  auto s = static_cast<cudaStream_t>(rank_stream());
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, s);
  return e == cudaSuccess ? cudaStreamSynchronize(s) : e;
}
inline cudaError_t fill_on_rank_stream(void* dst, int byte, size_t bytes) {
  auto s = static_cast<cudaStream_t>(rank_stream());
  cudaError_t e = cudaMemsetAsync(dst, byte, bytes, s);
  return e == cudaSuccess ? cudaStreamSynchronize(s) : e;
}

}  // namespace symmflow::cuda::testing
