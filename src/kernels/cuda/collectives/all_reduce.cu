// All-reduce kernels of the cuda backend over a Communicator's workspace (workspace_device.hpp).
//
// Note [cuda all-reduce]
// Every transfer between GPUs is a store into a peer's memory (NVLink writes are cheaper than
// reads), and a rank learns that data arrived from a flag the writer stores after it, with release
// order at system scope; the reader loads the flag with acquire order. Each block of the grid
// signals and waits on its own flag, so no grid-wide barrier is needed: block b of every rank
// handles the same elements (the launch shape depends on the size only).
//
// one_shot (W ranks, any input and output pointers):
//   1. block b copies its slice of the input into staging[parity][me] of every rank (itself too);
//   2. it stores tag = call + 1 into flags[0][me][b] of every rank;
//   3. it waits until flags[0][src][b] >= tag on its own rank for every src;
//   4. it reduces staging[parity][0..W-1] in rank order (in f32) into its slice of the output.
//   One synchronization on the critical path and no trailing barrier: the staging half written by
//   call k (parity k % 2) is written again only by call k + 2, and a rank starts call k + 2 only
//   after its call k + 1 saw every peer's call k + 1 flags, which peers store after their call k
//   ended (stream order), reads of staging included.
// two_shot (in place on a buffer of a DeviceHeap: v.data[r] is every rank's address of it):
//   1. the buffer is cut into W chunks; block b pushes its slice of chunk q into staging[parity]
//      [me] of rank q (q != me) and signals flags[0];
//   2. after the W-1 slices for its own chunk arrived, it reduces them with its own slice in rank
//      order, stores the result in its buffer and in every peer's buffer, and signals flags[1];
//   3. it waits for the W-1 results of the other chunks (flags[1]).
//   A peer writes our chunk q only after reading its own slice of it for step 1 (its flags[0]
//   said so), and the call ends only when every peer's results arrived, so the buffer is complete
//   and nobody writes it afterwards.
// ll (one_shot up to kLLMaxBytes, sizes and addresses multiple of 8 bytes): the same exchange,
//   but every 8 bytes of payload travel with the tag inside one 16-byte line (see
//   one_shot_ll_kernel): the reader polls the lines themselves, so there is no flag store, no
//   fence and no wait for acknowledgements: one link latency per call. Lines live in their own
//   staging (ll), where only tagged lines are ever written, so a stale line never carries the
//   tag of a later call. The second tag word is the tag's low byte under the call's signature
//   (Note [gpu collective agreement] in call_signature.hpp): the low byte tells a fresh half
//   from a stale one (the line at a parity was last written two calls ago), the rest is compared.
// Every flag-based kernel's first barrier also carries the signature (device_sync.cuh).
// The call count lives on the GPU (read by every block, advanced by the last block to finish), so
// a captured CUDA graph replays with fresh tags. A wait gives up after timeout_ns (globaltimer)
// and records the peer in status; the host raises (communicator.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "kernels/cuda/collectives/device_sync.cuh"
#include "kernels/cuda/early_launch.cuh"

namespace symmflow::cuda {
namespace {

template <typename U>
__device__ __forceinline__ U* slot(const WorkspaceView& v, int rank, int parity, int src) {
  return reinterpret_cast<U*>(v.staging[rank] + (int64_t(parity) * v.world + src) * v.stage_bytes);
}

template <typename T, int K, ReduceKind Op>
__global__ void __launch_bounds__(1024)
    one_shot_kernel(WorkspaceView v, const Pack<T, K>* in, Pack<T, K>* out, int64_t units) {
  using P = Pack<T, K>;
  wait_for_kernel_ahead();  // Note [early launch]: nothing is read before it
  release_kernel_behind();
  const auto [call, tag, parity, deadline] = begin_call(v);
  const int64_t per = (units + gridDim.x - 1) / gridDim.x;
  const int64_t lo = int64_t(blockIdx.x) * per;
  const int64_t hi = lo + per < units ? lo + per : units;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    P x = in[i];
    for (int q = 0; q < v.world; ++q) slot<P>(v, q, parity, v.rank)[i] = x;
  }
  signal_all(v, 0, tag, -1);
  if (wait_all(v, 0, tag, deadline, -1)) {
    const P* srcs[kMaxRanks];
#pragma unroll
    for (int s = 0; s < kMaxRanks; ++s) srcs[s] = slot<P>(v, v.rank, parity, s < v.world ? s : 0);
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      out[i] = reduce_units<T, K, Op>(srcs, v.world, i, float(v.world));
    }
  }
  finish(v, call);
}

// one_shot with the data carrying its own flag (Note [cuda all-reduce], "ll"): 8 bytes of payload
// travel as one 16-byte line {d0, tag, d1, tag}; each 8-byte half is stored atomically, so a reader
// that sees both tags equal to this call's also sees both payload words. Lines go to ll[q][parity]
// [me]; no separate flag, no fence, no wait for the stores to be acknowledged.
template <typename T, ReduceKind Op>
__global__ void __launch_bounds__(1024)
    one_shot_ll_kernel(WorkspaceView v, const uint2* in, uint2* out, int64_t units) {
  constexpr int K = 8 / sizeof(T);
  using P = Pack<T, K>;
  wait_for_kernel_ahead();  // Note [early launch]: nothing is read before it
  release_kernel_behind();
  const auto [call, tag, parity, deadline] = begin_call(v);
  const int64_t per = (units + gridDim.x - 1) / gridDim.x;
  const int64_t lo = int64_t(blockIdx.x) * per;
  const int64_t hi = lo + per < units ? lo + per : units;
  const uint32_t mark = ll_mark(v, tag);
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const uint2 d = in[i];
    const uint4 line = make_uint4(d.x, tag, d.y, mark);
    for (int q = 0; q < v.world; ++q) {
      if (q != v.rank) store_line(ll_slot(v, q, parity, v.rank) + i, line);
    }
  }
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    P packs[kMaxRanks];
    bool ok = true;
    for (int s = 0; s < v.world && ok; ++s) {
      uint2 d = in[i];
      if (s != v.rank)
        ok = ll_receive(v, ll_slot(v, v.rank, parity, s) + i, tag, mark, deadline, s, &d);
      packs[s] = *reinterpret_cast<const P*>(&d);
    }
    if (!ok) break;
    float acc[K];
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] = to_f(packs[0].v[k]);
    for (int s = 1; s < v.world; ++s) {
#pragma unroll
      for (int k = 0; k < K; ++k) acc[k] = combine<Op>(acc[k], to_f(packs[s].v[k]));
    }
    P r;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      r.v[k] = from_f<T>(Op == ReduceKind::avg ? acc[k] / float(v.world) : acc[k]);
    }
    out[i] = *reinterpret_cast<const uint2*>(&r);
  }
  finish(v, call);
}

// peer_in_turn: Note [two-shot peer order] in device_sync.cuh.

template <typename T, int K, ReduceKind Op>
__global__ void __launch_bounds__(1024) two_shot_kernel(WorkspaceView v, int64_t units) {
  using P = Pack<T, K>;
  wait_for_kernel_ahead();  // Note [early launch]: nothing is read before it
  release_kernel_behind();
  const auto [call, tag, parity, deadline] = begin_call(v);
  const int me = v.rank;
  const int64_t chunk = (units + v.world - 1) / v.world;
  const int64_t per = (chunk + gridDim.x - 1) / gridDim.x;
  const int64_t lo = int64_t(blockIdx.x) * per;
  const int64_t hi = lo + per < chunk ? lo + per : chunk;
  P* mine = reinterpret_cast<P*>(v.data[me]);
  // 1. Push my slice of every other rank's chunk to that rank, peers in a rotated order
  // (Note [two-shot peer order]).
  for (int k = 1; k < v.world; ++k) {
    const int q = peer_in_turn(me, k, v.world);
    P* dst = slot<P>(v, q, parity, me);
    const int64_t base = int64_t(q) * chunk;
    const int64_t end = units - base < hi ? units - base : hi;
    // Eight loads in flight before the stores.
    for (int64_t i = lo + threadIdx.x; i < end; i += 8 * int64_t(blockDim.x)) {
      P x[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int64_t j = i + u * int64_t(blockDim.x);
        if (j < end) x[u] = mine[base + j];
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int64_t j = i + u * int64_t(blockDim.x);
        if (j < end) dst[j] = x[u];
      }
    }
  }
  signal_all(v, 0, tag, me);
  if (wait_all(v, 0, tag, deadline, me)) {
    // 2. Reduce my chunk in rank order; store it here and in every peer's buffer.
    const int64_t base = int64_t(me) * chunk;
    const P* srcs[kMaxRanks];
#pragma unroll
    for (int s = 0; s < kMaxRanks; ++s) {
      srcs[s] = s == me ? mine + base : slot<P>(v, me, parity, s < v.world ? s : 0);
    }
    P* outs[kMaxRanks];  // every rank's buffer, peers in turn (Note [two-shot peer order])
    for (int k = 0; k < v.world; ++k) {
      outs[k] = reinterpret_cast<P*>(v.data[peer_in_turn(me, k, v.world)]);
    }
    const int64_t end = units - base < hi ? units - base : hi;
    for (int64_t i = lo + threadIdx.x; i < end; i += 2 * int64_t(blockDim.x)) {
      P r[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int64_t j = i + u * int64_t(blockDim.x);
        if (j < end) r[u] = reduce_units<T, K, Op>(srcs, v.world, j, float(v.world));
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int64_t j = i + u * int64_t(blockDim.x);
        if (j >= end) continue;
        for (int k = 0; k < v.world; ++k) outs[k][base + j] = r[u];
      }
    }
    signal_all(v, 1, tag, me);
    // 3. Wait for the other chunks.
    wait_all(v, 1, tag, deadline, me);
  }
  finish(v, call);
}


template <typename T, int K>
void one_shot_as(const WorkspaceView& v, const void* in, void* out, int64_t n, ReduceKind op,
                 const Launch& l, cudaStream_t s) {
  using P = Pack<T, K>;
  auto* i = static_cast<const P*>(in);
  auto* o = static_cast<P*>(out);
  const int64_t units = n / K;
  by_op(op, [&](auto tag) {
    launch_kernel(one_shot_kernel<T, K, decltype(tag)::value>, dim3(l.blocks), dim3(l.threads), 0,
                  s, l.early, v, i, o, units);
  });
}

template <typename T, int K>
void two_shot_as(const WorkspaceView& v, int64_t n, ReduceKind op, const Launch& l,
                 cudaStream_t s) {
  const int64_t units = n / K;
  by_op(op, [&](auto tag) {
    launch_kernel(two_shot_kernel<T, K, decltype(tag)::value>, dim3(l.blocks), dim3(l.threads), 0,
                  s, l.early, v, units);
  });
}

template <typename T, int K>
struct OneShot {
  static void run(const WorkspaceView& v, const void* in, void* out, int64_t n, ReduceKind op,
                  const Launch& l, cudaStream_t s) {
    one_shot_as<T, K>(v, in, out, n, op, l, s);
  }
};
template <typename T, int K>
struct OneShotLL {
  static void run(const WorkspaceView& v, const void* in, void* out, int64_t n, ReduceKind op,
                  const Launch& l, cudaStream_t s) {
    auto* i = static_cast<const uint2*>(in);
    auto* o = static_cast<uint2*>(out);
    const int64_t units = n * int64_t(sizeof(T)) / 8;
    by_op(op, [&](auto tag) {
      launch_kernel(one_shot_ll_kernel<T, decltype(tag)::value>, dim3(l.blocks), dim3(l.threads),
                    0, s, l.early, v, i, o, units);
    });
  }
};
template <typename T, int K>
struct TwoShot {
  static void run(const WorkspaceView& v, int64_t n, ReduceKind op, const Launch& l,
                  cudaStream_t s) {
    two_shot_as<T, K>(v, n, op, l, s);
  }
};

// Loads every variant of the collective kernels (Note [ranks sharing a GPU] in heap.cpp).
template <typename T, int K>
struct Preload {
  static void run() {
    for (ReduceKind op : {ReduceKind::sum, ReduceKind::avg, ReduceKind::max, ReduceKind::min}) {
      by_op(op, [&](auto tag) {
        cudaFuncAttributes a;
        cudaFuncGetAttributes(&a, one_shot_kernel<T, K, decltype(tag)::value>);
        cudaFuncGetAttributes(&a, two_shot_kernel<T, K, decltype(tag)::value>);
        cudaFuncGetAttributes(&a, one_shot_ll_kernel<T, decltype(tag)::value>);
      });
    }
  }
};

// F<T, K>::run(args...) for the element type, K = 16 bytes of T when vectorized, else 1.
template <template <typename, int> class F, typename... Args>
void dispatch(ElemType type, bool vec, Args&&... args) {
  switch (type) {
    case ElemType::f32:
      vec ? F<float, 4>::run(args...) : F<float, 1>::run(args...);
      return;
    case ElemType::bf16:
      vec ? F<__nv_bfloat16, 8>::run(args...) : F<__nv_bfloat16, 1>::run(args...);
      return;
    case ElemType::f16:
      vec ? F<__half, 8>::run(args...) : F<__half, 1>::run(args...);
      return;
  }
}

int preload_all_reduce_kernels() {
  for (ElemType t : {ElemType::f32, ElemType::bf16, ElemType::f16}) {
    dispatch<Preload>(t, false);
    dispatch<Preload>(t, true);
  }
  return int(cudaGetLastError());
}

const bool kPreloaded = register_kernel_preload(&preload_all_reduce_kernels);

}  // namespace

int launch_one_shot(const WorkspaceView& v, const void* in, void* out, int64_t n, ElemType type,
                    ReduceKind op, const Launch& l, void* stream) {
  dispatch<OneShot>(type, l.vec, v, in, out, n, op, l, static_cast<cudaStream_t>(stream));
  return int(cudaGetLastError());
}

int launch_one_shot_ll(const WorkspaceView& v, const void* in, void* out, int64_t n, ElemType type,
                       ReduceKind op, const Launch& l, void* stream) {
  dispatch<OneShotLL>(type, false, v, in, out, n, op, l, static_cast<cudaStream_t>(stream));
  return int(cudaGetLastError());
}

int launch_two_shot(const WorkspaceView& v, int64_t n, ElemType type, ReduceKind op,
                    const Launch& l, void* stream) {
  dispatch<TwoShot>(type, l.vec, v, n, op, l, static_cast<cudaStream_t>(stream));
  return int(cudaGetLastError());
}

}  // namespace symmflow::cuda
