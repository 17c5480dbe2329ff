// Device-side signals for kernels of your own (include from .cu files; C++17):
//
//   __global__ void halo(symmflow::cuda::SignalPads pads, float* peer_inbox, const float* x,
//                        int n, int next, int prev) {
//     for (int i = threadIdx.x; i < n; i += blockDim.x) peer_inbox[i] = x[i];  // a peer's heap
//     __syncthreads();
//     if (threadIdx.x == 0) symmflow::cuda::put_signal(pads, next, 0);  // then raise its flag
//     if (threadIdx.x == 0) symmflow::cuda::wait_signal(pads, prev, 0);  // ours arrived
//     __syncthreads();
//     ...                                                              // read our inbox
//   }
//
// put_signal publishes every store the calling thread made before it, and, after a
// __syncthreads, its block's (a system-scope fence, then the flag raised 0 -> 1 by
// compare-and-swap, waiting while the peer has not consumed the previous signal); wait_signal
// waits for the flag with acquire order and consumes it (1 -> 0). Both give up after
// pads.timeout_ns and return false; the caller decides what a failed wait means. One thread
// signals or waits per (peer, channel) at a time.
#pragma once

#include <cstdint>

#include "symmflow/runtime/cuda_signals.hpp"

namespace symmflow::cuda {

__device__ inline uint64_t device_now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ inline bool put_signal(const SignalPads& pads, int peer, int channel) {
  __threadfence_system();
  uint32_t* flag = pads.pad[peer] + channel * 8 + pads.rank;
  const uint64_t deadline = device_now_ns() + pads.timeout_ns;
  while (atomicCAS_system(flag, 0u, 1u) != 0u) {
    if (device_now_ns() > deadline) return false;
    __nanosleep(100);
  }
  return true;
}

__device__ inline bool wait_signal(const SignalPads& pads, int peer, int channel) {
  uint32_t* flag = pads.pad[pads.rank] + channel * 8 + peer;
  const uint64_t deadline = device_now_ns() + pads.timeout_ns;
  for (;;) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    if (v == 1u) break;
    if (device_now_ns() > deadline) return false;
  }
  *static_cast<volatile uint32_t*>(flag) = 0u;
  return true;
}

}  // namespace symmflow::cuda
