// Device helpers shared by the collective kernels of the cuda backend (all_reduce.cu,
// exchange.cu, fused_all_reduce_rms_norm.cu): system-scope release/acquire flags, the "ll" lines, bounded waits that record failures in the
// workspace status (workspace_device.hpp), the per-block signal/wait over every rank, the call
// count, and the f32 arithmetic of reductions (rank order, as on the cpu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/collectives/collectives.hpp"
#include "kernels/cuda/pointwise/convert.cuh"

namespace symmflow::cuda {
namespace {

__device__ __forceinline__ void store_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// A call's turn, read once at a kernel's start: the call count, the tag its signals carry
// (count + 1), the staging half (count parity) and the deadline of its waits.
struct CallTurn {
  uint32_t call;
  uint32_t tag;
  int parity;
  uint64_t deadline;
};
__device__ __forceinline__ CallTurn begin_call(const WorkspaceView& v) {
  const uint32_t call = *static_cast<volatile uint32_t*>(v.calls);
  return {call, call + 1, int(call & 1), now_ns() + v.timeout_ns};
}

// Records the first failure of the call in the workspace status (status_code); later ones are
// dropped. The block that records it copies it into the host-mapped report, the signatures first
// (`theirs`: the peer's, for kDisagree), so the host reads it at its next call without a copy.
__device__ __forceinline__ void fail(const WorkspaceView& v, int why, int peer,
                                     uint32_t theirs = 0) {
  const int code = status_code(v.op, why, peer);
  if (atomicCAS(v.status, 0, code) != 0) return;
  v.report[1] = int(theirs);
  v.report[2] = int(v.sig);
  __threadfence_system();
  v.report[0] = code;
}

// Waits until *flag >= tag (wrap-safe); false when the deadline passed or another block failed.
__device__ bool wait_tag(const uint32_t* flag, uint32_t tag, uint64_t deadline,
                         const volatile int* status) {
  for (int spins = 1;; ++spins) {
    if (int32_t(load_acquire(flag) - tag) >= 0) return true;
    if ((spins & 63) == 0 && (now_ns() > deadline || *status != 0)) return false;
  }
}

// Threads 0..W-1 wait for src = thread's flag of `phase` (skipping `skip`, -1 for none), then the
// block synchronizes. In phase 0 each then compares src's signature for this call with its own
// (Note [gpu collective agreement] in call_signature.hpp). Returns false (for the whole block)
// when a wait or a comparison failed.
__device__ bool wait_all(const WorkspaceView& v, int phase, uint32_t tag, uint64_t deadline,
                         int skip) {
  const int src = int(threadIdx.x);
  if (src < v.world && src != skip) {
    if (!wait_tag(v.flags[v.rank] + flag_index(phase, src, int(blockIdx.x)), tag, deadline,
                  v.status)) {
      fail(v, kTimedOut, src);
    } else if (phase == 0) {
      const uint32_t theirs = static_cast<volatile uint32_t*>(
          v.sigs[v.rank])[sig_index(int((tag - 1) & 1), src, int(blockIdx.x))];
      if (theirs != v.sig) fail(v, kDisagree, src, theirs);
    }
  }
  __syncthreads();
  return *static_cast<volatile int*>(v.status) == 0;
}

// After the block's stores: thread 0 publishes them to every rank (but `skip`) with `tag`; in
// phase 0 the call's signature first. The block barrier orders every thread's stores before
// thread 0's release store, and release is cumulative, so no separate fence is needed.
__device__ void signal_all(const WorkspaceView& v, int phase, uint32_t tag, int skip) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const int64_t at = sig_index(int((tag - 1) & 1), v.rank, int(blockIdx.x));
    for (int q = 0; q < v.world; ++q) {
      if (q == skip) continue;
      if (phase == 0) static_cast<volatile uint32_t*>(v.sigs[q])[at] = v.sig;
      store_release(v.flags[q] + flag_index(phase, v.rank, int(blockIdx.x)), tag);
    }
  }
}

// The last block to finish advances the call count.
__device__ void finish(const WorkspaceView& v, uint32_t call) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(v.done, 1u) == gridDim.x - 1) {
      *v.done = 0;
      __threadfence();
      *static_cast<volatile uint32_t*>(v.calls) = call + 1;
    }
  }
}

// Note [two-shot peer order]
// Every block of every rank used to push to peers 0, 1, 2, ... in turn, so at four ranks the
// three others all wrote into rank 0 first, then rank 1: one GPU's incoming links saturated while
// the rest idled. Block b of rank me takes its k-th peer as me + 1 + (k - 1 + b) mod (W - 1):
// at each turn the ranks write to a permutation of each other, and a rank's blocks spread over
// all its peers at once. k = 0 is the rank itself (for the result stores of step 2).
__device__ __forceinline__ int peer_in_turn(int me, int k, int world) {
  if (k == 0) return me;
  return (me + 1 + (k - 1 + int(blockIdx.x)) % (world - 1)) % world;
}

// Matches the cpu kernels (kernels/cpu/collectives/reduce.hpp): max keeps acc unless acc < v.
template <ReduceKind Op>
__device__ __forceinline__ float combine(float acc, float v) {
  if constexpr (Op == ReduceKind::max) return acc < v ? v : acc;
  if constexpr (Op == ReduceKind::min) return v < acc ? v : acc;
  return acc + v;
}

// K elements moved as one unit (16 bytes when vectorized).
template <typename T, int K>
struct alignas(sizeof(T) * K) Pack {
  T v[K];
};

template <typename T, int K, ReduceKind Op>
__device__ __forceinline__ Pack<T, K> reduce_units(const Pack<T, K>* const* srcs, int world,
                                                   int64_t i, float divisor) {
  Pack<T, K> first = srcs[0][i];
  float acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = to_f(first.v[k]);
#pragma unroll
  for (int s = 1; s < kMaxRanks; ++s) {  // unrolled over kMaxRanks: srcs stays in registers
    if (s >= world) break;
    Pack<T, K> p = srcs[s][i];
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] = combine<Op>(acc[k], to_f(p.v[k]));
  }
  Pack<T, K> out;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    out.v[k] = from_f<T>(Op == ReduceKind::avg ? acc[k] / divisor : acc[k]);
  }
  return out;
}

// The "ll" lines (Note [cuda all-reduce] in all_reduce.cu): 8 bytes of payload travel as one
// 16-byte line {d0, tag, d1, mark}, each 8-byte half stored atomically, into ll[q][parity][src];
// `mark` is the tag's low byte under the call's signature (Note [gpu collective agreement]).
__device__ __forceinline__ void store_line(uint4* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint4 load_line(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}
__device__ __forceinline__ uint4* ll_slot(const WorkspaceView& v, int rank, int parity, int src) {
  return reinterpret_cast<uint4*>(v.ll[rank] + (int64_t(parity) * v.world + src) * v.ll_bytes);
}
__device__ __forceinline__ uint32_t ll_mark(const WorkspaceView& v, uint32_t tag) {
  return (tag & 0xffu) | (v.sig << 8);
}
// Polls the line at `src` (sent by rank `peer`) until it carries this call's tag; its payload in
// *d. False, with the failure recorded, when the deadline passes or another block failed, or
// when the peer's signature differs.
__device__ __forceinline__ bool ll_receive(const WorkspaceView& v, const uint4* src, uint32_t tag,
                                          uint32_t mark, uint64_t deadline, int peer, uint2* d) {
  uint4 line = load_line(src);
  for (int spins = 1; line.y != tag || (line.w & 0xffu) != (tag & 0xffu); ++spins) {
    if ((spins & 63) == 0 && (now_ns() > deadline || *static_cast<volatile int*>(v.status))) {
      if (now_ns() > deadline) fail(v, kTimedOut, peer);
      return false;
    }
    line = load_line(src);
  }
  if (line.w != mark) {
    // A torn line (this call's first half landed, its second not yet, and the stale second half
    // is from a multiple of 256 calls ago) looks alike for a moment: a disagreement is a
    // mismatch that lasts (Note [gpu collective agreement]).
    const uint64_t until = now_ns() + 20000;
    while (line.w != mark && now_ns() < until) line = load_line(src);
    if (line.w != mark) {
      fail(v, kDisagree, peer, line.w >> 8);
      return false;
    }
  }
  *d = make_uint2(line.x, line.z);
  return true;
}

// f(std::integral_constant<ReduceKind, op>{}): the reduce op as a template argument.
template <typename F>
void by_op(ReduceKind op, F&& f) {
  switch (op) {
    case ReduceKind::sum:
      f(std::integral_constant<ReduceKind, ReduceKind::sum>{});
      return;
    case ReduceKind::avg:
      f(std::integral_constant<ReduceKind, ReduceKind::avg>{});
      return;
    case ReduceKind::max:
      f(std::integral_constant<ReduceKind, ReduceKind::max>{});
      return;
    case ReduceKind::min:
      f(std::integral_constant<ReduceKind, ReduceKind::min>{});
      return;
  }
}

// f(T{}, op) with T the element type of `type` (float, __nv_bfloat16, __half) and op as by_op
// gives it: a collective's kernel instance for a call,
//   by_type_and_op(type, kind, [&](auto t, auto op) {
//     my_kernel<decltype(t), decltype(op)::value><<<blocks, threads, 0, stream>>>(...);
//   });
template <typename F>
void by_type_and_op(ElemType type, ReduceKind op, F&& f) {
  by_op(op, [&](auto o) {
    switch (type) {
      case ElemType::f32:
        f(float{}, o);
        return;
      case ElemType::bf16:
        f(__nv_bfloat16{}, o);
        return;
      case ElemType::f16:
        f(__half{}, o);
        return;
    }
  });
}

// f(T{}, op) for every element type and reduce op: what a file's preload walks
// (register_kernel_preload in collectives.hpp).
template <typename F>
void every_type_and_op(F&& f) {
  for (ElemType t : {ElemType::f32, ElemType::bf16, ElemType::f16}) {
    for (ReduceKind op : {ReduceKind::sum, ReduceKind::avg, ReduceKind::max, ReduceKind::min})
      by_type_and_op(t, op, f);
  }
}

}  // namespace
}  // namespace symmflow::cuda
