// The cuda kernels of the collectives other than all-reduce, over a Communicator's workspace
// (workspace_device.hpp), and of the point-to-point signals.
//
// Note [cuda exchange]
// all_gather, reduce_scatter, all_to_all, collective_permute, broadcast and barrier are one kernel
// each, exchange_kernel<Body>: every block
//   1. signals flags[0] of every peer with the call's tag and waits for every peer's flags[0]
//      (the peers' inputs are complete and their outputs free: their kernel started, so every
//      earlier work of their stream ended);
//   2. runs its slice of the body: loads from peers' inputs (pull) or stores into peers' outputs
//      (push), through peer pointers;
//   3. signals flags[1] and waits for every peer's flags[1].
// A rank's kernel ends only when block b of every rank passed step 3 for every b, i.e. when every
// block of every rank finished its loads and stores: nobody reads an input after its owner goes
// on, and every pushed byte arrived. This needs the same grid on every rank (the launch shape is a
// function of the sizes, equal on every rank), not the same slices. The call count and tags are the
// all-reduce's (Note [cuda all-reduce]), so both families share one communicator and one order.
// all_to_all reads every rank's splits after step 1 and checks them all (same answer on every
// rank); bad splits copy nothing and record kBadSplits for the host to raise.
//
// put_signal: the blocks copy src into the peer's dst; the last block to finish (put_done counter,
// system fences on both sides) raises the peer's flag signals[peer][channel][me] from 0 to 1 by
// compare-and-swap, waiting while the peer has not consumed the previous signal. wait_signal
// waits for its flag to be 1 (acquire) and stores 0. So every store of the put is visible after
// the wait, and a flag carries one signal at a time (Note [signal protocol] in group.hpp).
#include "kernels/cuda/collectives/device_sync.cuh"

namespace symmflow::cuda {
namespace {

template <typename Body>
__global__ void __launch_bounds__(1024)
    exchange_kernel(WorkspaceView v, Body body, int64_t units) {
  const auto [call, tag, parity, deadline] = begin_call(v);
  (void)parity;
  const int me = v.rank;
  signal_all(v, 0, tag, me);
  if (wait_all(v, 0, tag, deadline, me)) {
    const int64_t per = (units + gridDim.x - 1) / gridDim.x;
    const int64_t lo = int64_t(blockIdx.x) * per;
    const int64_t hi = lo + per < units ? lo + per : units;
    body(v, lo, hi);
    signal_all(v, 1, tag, me);
    wait_all(v, 1, tag, deadline, me);
  }
  finish(v, call);
}

// Copies [lo, hi) of the concatenation of the plan's segments, in units U.
template <typename U>
struct CopyBody {
  CopyPlan plan;
  __device__ void operator()(const WorkspaceView&, int64_t lo, int64_t hi) const {
    int64_t start = 0;
    for (int k = 0; k < plan.count; ++k) {
      const int64_t n = plan.seg[k].bytes / int64_t(sizeof(U));
      const int64_t a = lo > start ? lo : start;
      const int64_t b = hi < start + n ? hi : start + n;
      const U* src = static_cast<const U*>(plan.seg[k].src) - start;
      U* dst = static_cast<U*>(plan.seg[k].dst) - start;
      for (int64_t i = a + threadIdx.x; i < b; i += blockDim.x) dst[i] = src[i];
      start += n;
    }
  }
};

// out[u] = reduce over ranks p (rank order, f32) of src[p][o * row_stride + i], u = o * chunk + i;
// K elements per load (16 bytes when chunk, row_stride and every pointer allow it).
template <typename T, int K, ReduceKind Op>
struct ReduceScatterBody {
  ReduceScatterPlan plan;
  __device__ void operator()(const WorkspaceView& v, int64_t lo, int64_t hi) const {
    using P = Pack<T, K>;
    const P* srcs[kMaxRanks];
#pragma unroll
    for (int s = 0; s < kMaxRanks; ++s)
      srcs[s] = static_cast<const P*>(plan.src[s < v.world ? s : 0]);
    P* out = static_cast<P*>(plan.out);
    const int64_t chunk = plan.chunk / K, stride = plan.row_stride / K;
    for (int64_t u = lo + threadIdx.x; u < hi; u += blockDim.x)
      out[u] = reduce_units<T, K, Op>(srcs, v.world, u / chunk * stride + u % chunk,
                                      float(v.world));
  }
};

// Receives the rows every rank sends to this one, packed in rank order; units U of `out`.
template <typename U>
struct AllToAllBody {
  AllToAllPlan plan;
  __device__ void operator()(const WorkspaceView& v, int64_t lo, int64_t hi) const {
    __shared__ int64_t splits[kMaxRanks * kMaxRanks];
    __shared__ int64_t src_off[kMaxRanks], dst_off[kMaxRanks], count[kMaxRanks];
    __shared__ int bad;
    const int w = v.world, me = v.rank;
    if (int(threadIdx.x) < w * w) {
      const int p = int(threadIdx.x) / w, q = int(threadIdx.x) % w;
      splits[threadIdx.x] = static_cast<const volatile int64_t*>(plan.splits[p])[q];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      bad = -1;
      for (int p = 0; p < w && bad < 0; ++p) {
        int64_t sent = 0;
        for (int q = 0; q < w; ++q) {
          if (splits[p * w + q] < 0) bad = p;
          sent += splits[p * w + q];
        }
        if (sent > plan.in_rows) bad = p;
      }
      for (int q = 0; q < w && bad < 0; ++q) {
        int64_t received = 0;
        for (int p = 0; p < w; ++p) received += splits[p * w + q];
        if (received > plan.out_rows) bad = q;
      }
      int64_t offset = 0;
      for (int p = 0; p < w && bad < 0; ++p) {
        int64_t row = 0;
        for (int q = 0; q < me; ++q) row += splits[p * w + q];
        const int64_t rows = splits[p * w + me];
        src_off[p] = row * plan.row_bytes / int64_t(sizeof(U));
        dst_off[p] = offset * plan.row_bytes / int64_t(sizeof(U));
        count[p] = rows * plan.row_bytes / int64_t(sizeof(U));
        if (blockIdx.x == 0) {
          plan.meta[p] = rows;
          plan.meta[w + p] = offset;
        }
        offset += rows;
      }
      if (bad >= 0 && blockIdx.x == 0) fail(v, kBadSplits, bad);
    }
    __syncthreads();
    if (bad >= 0) return;
    U* out = static_cast<U*>(plan.out);
    for (int p = 0; p < w; ++p) {
      const int64_t a = lo > dst_off[p] ? lo : dst_off[p];
      const int64_t b = hi < dst_off[p] + count[p] ? hi : dst_off[p] + count[p];
      const U* src = static_cast<const U*>(plan.in[p]) + src_off[p] - dst_off[p];
      for (int64_t i = a + threadIdx.x; i < b; i += blockDim.x) out[i] = src[i];
    }
  }
};

template <typename U>
__global__ void __launch_bounds__(1024)
    put_signal_kernel(WorkspaceView v, const U* src, U* dst, int64_t units, int peer, int channel) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < units;
       i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  __threadfence_system();
  uint32_t* done = v.put_done + channel * kMaxRanks + peer;
  if (atomicAdd(done, 1u) != gridDim.x - 1) return;
  *static_cast<volatile uint32_t*>(done) = 0;
  __threadfence_system();
  uint32_t* flag = v.signals[peer] + channel * kMaxRanks + v.rank;
  const uint64_t deadline = now_ns() + v.timeout_ns;
  while (atomicCAS_system(flag, 0u, 1u) != 0u) {
    if (now_ns() > deadline) {
      fail(v, kTimedOut, peer);
      return;
    }
    __nanosleep(100);
  }
}

__global__ void wait_signal_kernel(WorkspaceView v, int peer, int channel) {
  uint32_t* flag = v.signals[v.rank] + channel * kMaxRanks + peer;
  if (!wait_tag(flag, 1u, now_ns() + v.timeout_ns, v.status)) {
    fail(v, kTimedOut, peer);
    return;
  }
  *static_cast<volatile uint32_t*>(flag) = 0u;
}

__global__ void fill_u32_kernel(uint32_t* p, uint32_t value, int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    p[i] = value;
  }
}

template <typename T, int K>
struct ReduceScatterOf {
  static void run(const WorkspaceView& v, const ReduceScatterPlan& plan, ReduceKind op,
                  const Launch& l, cudaStream_t s) {
    const int64_t units = plan.outer * plan.chunk / K;
    by_op(op, [&](auto tag) {
      using B = ReduceScatterBody<T, K, decltype(tag)::value>;
      exchange_kernel<B><<<l.blocks, l.threads, 0, s>>>(v, B{plan}, units);
    });
  }
};

// f(U{}) for the unit of `unit` bytes.
template <typename F>
void by_unit(int unit, F&& f) {
  switch (unit) {
    case 16:
      return f(uint4{});
    case 8:
      return f(uint2{});
    case 4:
      return f(uint32_t{});
    case 2:
      return f(uint16_t{});
    default:
      return f(uint8_t{});
  }
}

}  // namespace

int launch_exchange_copy(const WorkspaceView& v, const CopyPlan& plan, int unit, const Launch& l,
                         void* stream) {
  int64_t bytes = 0;
  for (int k = 0; k < plan.count; ++k) bytes += plan.seg[k].bytes;
  by_unit(unit, [&](auto u) {
    using U = decltype(u);
    exchange_kernel<CopyBody<U>><<<l.blocks, l.threads, 0, static_cast<cudaStream_t>(stream)>>>(
        v, CopyBody<U>{plan}, bytes / int64_t(sizeof(U)));
  });
  return int(cudaGetLastError());
}

int launch_reduce_scatter(const WorkspaceView& v, const ReduceScatterPlan& plan, ElemType type,
                          ReduceKind op, const Launch& l, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (type) {
    case ElemType::f32:
      l.vec ? ReduceScatterOf<float, 4>::run(v, plan, op, l, s)
            : ReduceScatterOf<float, 1>::run(v, plan, op, l, s);
      break;
    case ElemType::bf16:
      l.vec ? ReduceScatterOf<__nv_bfloat16, 8>::run(v, plan, op, l, s)
            : ReduceScatterOf<__nv_bfloat16, 1>::run(v, plan, op, l, s);
      break;
    case ElemType::f16:
      l.vec ? ReduceScatterOf<__half, 8>::run(v, plan, op, l, s)
            : ReduceScatterOf<__half, 1>::run(v, plan, op, l, s);
      break;
  }
  return int(cudaGetLastError());
}

int launch_all_to_all(const WorkspaceView& v, const AllToAllPlan& plan, int unit, const Launch& l,
                      void* stream) {
  by_unit(unit, [&](auto u) {
    using U = decltype(u);
    exchange_kernel<AllToAllBody<U>>
        <<<l.blocks, l.threads, 0, static_cast<cudaStream_t>(stream)>>>(
            v, AllToAllBody<U>{plan}, plan.out_rows * plan.row_bytes / int64_t(sizeof(U)));
  });
  return int(cudaGetLastError());
}

int launch_put_signal(const WorkspaceView& v, const void* src, void* dst, int64_t bytes, int unit,
                      int peer, int channel, const Launch& l, void* stream) {
  by_unit(unit, [&](auto u) {
    using U = decltype(u);
    put_signal_kernel<U><<<l.blocks, l.threads, 0, static_cast<cudaStream_t>(stream)>>>(
        v, static_cast<const U*>(src), static_cast<U*>(dst), bytes / int64_t(sizeof(U)), peer,
        channel);
  });
  return int(cudaGetLastError());
}

int launch_wait_signal(const WorkspaceView& v, int peer, int channel, void* stream) {
  wait_signal_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(v, peer, channel);
  return int(cudaGetLastError());
}

int launch_fill_u32(uint32_t* p, uint32_t value, int64_t count, void* stream) {
  if (count == 0) return 0;
  const int blocks = int(count / 256 + 1 < 1024 ? count / 256 + 1 : 1024);
  fill_u32_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(p, value, count);
  return int(cudaGetLastError());
}

namespace {

int preload_exchange_kernels() {
  cudaFuncAttributes a;
  for (int unit : {1, 2, 4, 8, 16}) {
    by_unit(unit, [&](auto u) {
      using U = decltype(u);
      cudaFuncGetAttributes(&a, exchange_kernel<CopyBody<U>>);
      cudaFuncGetAttributes(&a, exchange_kernel<AllToAllBody<U>>);
      cudaFuncGetAttributes(&a, put_signal_kernel<U>);
    });
  }
  for (ReduceKind op : {ReduceKind::sum, ReduceKind::avg, ReduceKind::max, ReduceKind::min}) {
    by_op(op, [&](auto tag) {
      constexpr ReduceKind k = decltype(tag)::value;
      cudaFuncGetAttributes(&a, exchange_kernel<ReduceScatterBody<float, 1, k>>);
      cudaFuncGetAttributes(&a, exchange_kernel<ReduceScatterBody<float, 4, k>>);
      cudaFuncGetAttributes(&a, exchange_kernel<ReduceScatterBody<__nv_bfloat16, 1, k>>);
      cudaFuncGetAttributes(&a, exchange_kernel<ReduceScatterBody<__nv_bfloat16, 8, k>>);
      cudaFuncGetAttributes(&a, exchange_kernel<ReduceScatterBody<__half, 1, k>>);
      cudaFuncGetAttributes(&a, exchange_kernel<ReduceScatterBody<__half, 8, k>>);
    });
  }
  cudaFuncGetAttributes(&a, wait_signal_kernel);
  cudaFuncGetAttributes(&a, fill_u32_kernel);
  return int(cudaGetLastError());
}

const bool kPreloaded = register_kernel_preload(&preload_exchange_kernels);

}  // namespace

}  // namespace symmflow::cuda
