// symm_mem::fused_all_reduce_add_rms_norm and its _out variant on GPUs (Note [fused all-reduce
// add rms_norm] in src/ops/symm_mem/defs.cpp), the whole collective in one file (Note [one file
// per collective] in workspace_access.hpp): the kernel, its launch on the group's communicator
// workspace, the op's `impl` and the preload of its kernels.
//
// Note [fused all-reduce rms_norm on GPUs]
// The result is the composition's: per row, reduce the ranks' partial sums in rank order (f32),
// round to T, add the residual and round (= aten::add.Tensor), store that as residual_out, sum its
// squares over the row, store out = summed * (1 / sqrt(mean + eps)) * weight rounded to T
// (= aten::rms_norm); only the order of the row's sum of squares differs from the cpu kernel.
// Three exchanges, chosen like the all-reduce's (cuda_all_reduce_algorithm, in place: Note
// [one-shot limit per world] in src/kernels/algorithm.cpp), one_shot and two_shot moving 16 bytes
// per access where every size and address allows (else one element):
//   one_shot_ll (up to kCudaLLMaxBytes, rows of whole 8-byte units, every pointer 8-aligned):
//     block b sends its rows as "ll" lines (data and tag in one 16-byte line, Note [cuda
//     all-reduce]) and normalizes them from its input and the lines polled as they land. A
//     decode step's row (4096 bf16, 8 KiB) took 10.5 us with the flags of one_shot on 2xH200,
//     where the plain ll all-reduce took 3.7 (bench_cuda_allreduce, symmflow_fused_norm row), 6.5 with
//     this exchange, 6.0 with a thread's first kRowCache units of residual and weight loaded
//     before their sums are waited for;
//   one_shot: block b pushes its rows into staging[parity][me] of every rank, signals, waits for
//     every rank's, then normalizes its rows from the W staged copies (Note [cuda all-reduce]);
//   two_shot: rows are cut into W chunks; block b pushes its rows of chunk q to rank q (peers in
//     turn, Note [two-shot peer order]), waits for the W - 1 slices of its rows of chunk `me`,
//     reduces them with its own input, and stores the rounded sums into staging[parity][me] of
//     every rank at the same rows (a chunk's sums live in the slot of the rank that reduced it,
//     which nobody pushes that chunk into); after the second flag each rank normalizes every row
//     from the sums in its own staging. Each rank moves 2 (W - 1) / W of the rows over NVLink
//     instead of (W - 1), and reduces 1 / W of them instead of all: the one_shot kernel took
//     970 us for 8192 rows of 4096 bf16 on 2xH200 where NCCL's all-reduce took 249 us.
// Rows go to blocks whole (the norm needs a row's sum); a block normalizes `groups` rows at once,
// tpr threads each, a thread keeping up to kRowCache units of its row in registers between the
// sum of squares and the scaled write. Block b of every rank takes the same rows: the launch
// shape depends on the sizes only (not on alignment), so ranks with and without 16-byte
// alignment still exchange the same bytes at the same places.
// With one rank there is nothing to exchange: rows are normalized from the input.
//
// Expects: `input` a GPU symmetric tensor of the op's group (heap_of names op and argument);
//   residual and weight of any layout (made contiguous first); f32, bf16 or f16; rows * n
//   elements of input at most what the communicator stages (it is made larger when not).
//   Strided outputs go through a contiguous stand-in.
// Refuses: what the shape function refuses (also checked here for the _out variant), dtypes other
//   than f32 / bf16 / f16 (naming op, dtype and backend), unknown reduce ops.
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "kernels/cuda/collectives/device_sync.cuh"
#include "kernels/cuda/collectives/spanning.hpp"
#include "kernels/cuda/collectives/symm_args.hpp"
#include "kernels/cuda/collectives/workspace_access.hpp"
#include "kernels/cuda/early_launch.cuh"
#include "runtime/cuda/check.hpp"
#include "symmflow/kernels/algorithm.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

// Over `rows` contiguous rows of n elements (weight: n).
struct Plan {
  const void* in = nullptr;  // this rank's partial sums
  const void* residual = nullptr;
  const void* weight = nullptr;
  void* out = nullptr;
  void* residual_out = nullptr;
  int64_t rows = 0, n = 0;
  float eps = 0;
  int tpr = 32;  // threads per row (a multiple of 32); blockDim.x / tpr rows at once
};

constexpr int kRowCache = 2;  // units of its row a thread keeps in registers

// The sum of v over each group of tpr threads (tpr a multiple of 32 dividing blockDim.x), given
// to every thread of the group.
__device__ float row_sum(float v, int tpr) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  const int warps = tpr / 32, first = int(threadIdx.x) / tpr * warps;
  float total = 0;
  for (int w = 0; w < warps; ++w) total += partial[first + w];
  __syncthreads();
  return total;
}

// Normalizes rows [lo, hi) (the same for the whole block), `groups` rows at a time; summed(r, u)
// is unit u of row r's reduced sum, already rounded to T.
template <typename T, int K, typename Summed>
__device__ void norm_rows(const Plan& p, int64_t lo, int64_t hi, Summed summed) {
  using P = Pack<T, K>;
  const int64_t units = p.n / K;
  const int tpr = p.tpr, groups = int(blockDim.x) / tpr;
  const int lane = int(threadIdx.x) % tpr;
  const P* residual = static_cast<const P*>(p.residual);
  const P* weight = static_cast<const P*>(p.weight);
  P* out = static_cast<P*>(p.out);
  P* residual_out = static_cast<P*>(p.residual_out);
  for (int64_t first = lo; first < hi; first += groups) {
    const int64_t r = first + int(threadIdx.x) / tpr;
    const bool live = r < hi;
    const int64_t row = r * units;
    float cache[kRowCache][K];
    float squares = 0;
    auto add = [&](int64_t u, const P& res, float* keep) {
      const P s = summed(r, u);
      P o;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        o.v[k] = from_f<T>(to_f(s.v[k]) + to_f(res.v[k]));
        const float f = to_f(o.v[k]);
        if (keep) keep[k] = f;
        squares += f * f;
      }
      residual_out[row + u] = o;
    };
    // With 8-byte packs (the ll exchange) the cached units' residual and weight are loaded before
    // their sums are waited for, so their latency hides behind the exchange's (8 KiB on 2xH200:
    // 6.5 us, then 6.0 and 6.2 in two calls). With 16-byte packs it showed no gain (512 KiB:
    // 13.0 us without, 14.1 with, 14.0 without again, within the spread between calls), so they
    // stay loaded where used.
    constexpr bool kEarly = sizeof(P) <= 8;
    P res[kRowCache], w[kRowCache];
#pragma unroll
    for (int c = 0; c < kRowCache; ++c) {
      const int64_t u = lane + int64_t(c) * tpr;
      if (kEarly && live && u < units) {
        res[c] = residual[row + u];
        w[c] = weight[u];
      }
    }
#pragma unroll
    for (int c = 0; c < kRowCache; ++c) {
      const int64_t u = lane + int64_t(c) * tpr;
      if (live && u < units) add(u, kEarly ? res[c] : residual[row + u], cache[c]);
    }
    for (int64_t u = lane + int64_t(kRowCache) * tpr; live && u < units; u += tpr)
      add(u, residual[row + u], nullptr);
    const float scale = 1.0f / sqrtf(row_sum(squares, tpr) / float(p.n) + p.eps);
    auto scaled = [&](int64_t u, const float* f, const P& wu) {
      P o;
#pragma unroll
      for (int k = 0; k < K; ++k) o.v[k] = from_f<T>(f[k] * scale * to_f(wu.v[k]));
      out[row + u] = o;
    };
#pragma unroll
    for (int c = 0; c < kRowCache; ++c) {
      const int64_t u = lane + int64_t(c) * tpr;
      if (live && u < units) scaled(u, cache[c], kEarly ? w[c] : weight[u]);
    }
    for (int64_t u = lane + int64_t(kRowCache) * tpr; live && u < units; u += tpr) {
      const P s = residual_out[row + u];
      float f[K];
#pragma unroll
      for (int k = 0; k < K; ++k) f[k] = to_f(s.v[k]);
      scaled(u, f, weight[u]);
    }
  }
}

// Copies units [lo, hi) of `from` to `to`, eight loads in flight before the stores.
template <typename P>
__device__ void push_units(const P* from, P* to, int64_t lo, int64_t hi) {
  for (int64_t i = lo + threadIdx.x; i < hi; i += 8 * int64_t(blockDim.x)) {
    P x[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int64_t j = i + u * int64_t(blockDim.x);
      if (j < hi) x[u] = from[j];
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int64_t j = i + u * int64_t(blockDim.x);
      if (j < hi) to[j] = x[u];
    }
  }
}

template <typename P>
__device__ __forceinline__ P* staged(const WorkspaceView& v, int rank, int parity, int src) {
  return reinterpret_cast<P*>(v.staging[rank] + (int64_t(parity) * v.world + src) * v.stage_bytes);
}

// Block b's rows of `count` rows starting at `base`.
struct Rows {
  int64_t lo, hi;
};
__device__ Rows block_rows(int64_t base, int64_t count) {
  const int64_t per = (count + gridDim.x - 1) / gridDim.x;
  const int64_t lo = base + int64_t(blockIdx.x) * per;
  const int64_t hi = lo + per < base + count ? lo + per : base + count;
  return {lo, hi};
}

template <typename T, int K, ReduceKind Op>
__global__ void __launch_bounds__(1024) one_shot_norm_kernel(WorkspaceView v, Plan p) {
  using P = Pack<T, K>;
  const auto [call, tag, parity, deadline] = begin_call(v);
  const int64_t units = p.n / K;
  const P* in = static_cast<const P*>(p.in);
  const Rows rows = block_rows(0, p.rows);
  if (v.world == 1) {
    norm_rows<T, K>(p, rows.lo, rows.hi, [&](int64_t r, int64_t u) { return in[r * units + u]; });
    finish(v, call);
    return;
  }
  for (int q = 0; q < v.world; ++q)
    push_units(in, staged<P>(v, q, parity, v.rank), rows.lo * units, rows.hi * units);
  signal_all(v, 0, tag, -1);
  if (wait_all(v, 0, tag, deadline, -1)) {
    const P* srcs[kMaxRanks];
#pragma unroll
    for (int s = 0; s < kMaxRanks; ++s) srcs[s] = staged<P>(v, v.rank, parity, s < v.world ? s : 0);
    norm_rows<T, K>(p, rows.lo, rows.hi, [&](int64_t r, int64_t u) {
      return reduce_units<T, K, Op>(srcs, v.world, r * units + u, float(v.world));
    });
  }
  finish(v, call);
}

// one_shot_ll (Note [fused all-reduce rms_norm on GPUs]): block b sends its rows as "ll" lines
// (device_sync.cuh) to every peer, then normalizes them, each unit of a row's sum reduced in rank
// order from its own input and the W - 1 lines polled where they land: no flag, no fence.
template <typename T, ReduceKind Op>
__global__ void __launch_bounds__(1024) one_shot_ll_norm_kernel(WorkspaceView v, Plan p) {
  constexpr int K = 8 / sizeof(T);
  using P = Pack<T, K>;
  wait_for_kernel_ahead();  // Note [early launch]: nothing is read before it
  release_kernel_behind();
  const auto [call, tag, parity, deadline] = begin_call(v);
  const int64_t units = p.n / K;
  const uint2* in = static_cast<const uint2*>(p.in);
  const Rows rows = block_rows(0, p.rows);
  const uint32_t mark = ll_mark(v, tag);
  for (int64_t i = rows.lo * units + threadIdx.x; i < rows.hi * units; i += blockDim.x) {
    const uint2 d = in[i];
    const uint4 line = make_uint4(d.x, tag, d.y, mark);
    for (int q = 0; q < v.world; ++q) {
      if (q != v.rank) store_line(ll_slot(v, q, parity, v.rank) + i, line);
    }
  }
  bool ok = true;  // after a failure the rest reads zeros (the host raises at its next call)
  norm_rows<T, K>(p, rows.lo, rows.hi, [&](int64_t r, int64_t u) {
    const int64_t i = r * units + u;
    float acc[K];
    for (int s = 0; s < v.world; ++s) {
      uint2 d = in[i];
      if (s != v.rank) {
        if (ok) ok = ll_receive(v, ll_slot(v, v.rank, parity, s) + i, tag, mark, deadline, s, &d);
        if (!ok) d = make_uint2(0, 0);
      }
      const P x = *reinterpret_cast<const P*>(&d);
#pragma unroll
      for (int k = 0; k < K; ++k) acc[k] = s == 0 ? to_f(x.v[k]) : combine<Op>(acc[k], to_f(x.v[k]));
    }
    P out;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      out.v[k] = from_f<T>(Op == ReduceKind::avg ? acc[k] / float(v.world) : acc[k]);
    }
    return out;
  });
  finish(v, call);
}

template <typename T, int K, ReduceKind Op>
__global__ void __launch_bounds__(1024) two_shot_norm_kernel(WorkspaceView v, Plan p) {
  using P = Pack<T, K>;
  const auto [call, tag, parity, deadline] = begin_call(v);
  const int me = v.rank;
  const int64_t units = p.n / K;
  const int64_t chunk = (p.rows + v.world - 1) / v.world;
  auto chunk_rows = [&](int q) {
    const int64_t base = int64_t(q) * chunk < p.rows ? int64_t(q) * chunk : p.rows;
    const int64_t count = p.rows - base < chunk ? p.rows - base : chunk;
    return block_rows(base, count);
  };
  const P* in = static_cast<const P*>(p.in);
  // 1. My partial sums of each peer's chunk go to that peer.
  for (int k = 1; k < v.world; ++k) {
    const int q = peer_in_turn(me, k, v.world);
    const Rows rows = chunk_rows(q);
    push_units(in, staged<P>(v, q, parity, me), rows.lo * units, rows.hi * units);
  }
  signal_all(v, 0, tag, me);
  if (wait_all(v, 0, tag, deadline, me)) {
    // 2. Reduce my chunk in rank order; its sums go to every rank's slot `me`.
    const P* srcs[kMaxRanks];
#pragma unroll
    for (int s = 0; s < kMaxRanks; ++s) {
      srcs[s] = s == me ? in : staged<P>(v, me, parity, s < v.world ? s : 0);
    }
    P* sums[kMaxRanks];
    for (int k = 0; k < v.world; ++k) sums[k] = staged<P>(v, peer_in_turn(me, k, v.world), parity, me);
    const Rows mine = chunk_rows(me);
    const int64_t end = mine.hi * units;
    for (int64_t i = mine.lo * units + threadIdx.x; i < end; i += 4 * int64_t(blockDim.x)) {
      P r[4];  // four units' loads in flight before the stores
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t j = i + u * int64_t(blockDim.x);
        if (j < end) r[u] = reduce_units<T, K, Op>(srcs, v.world, j, float(v.world));
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t j = i + u * int64_t(blockDim.x);
        if (j >= end) continue;
        for (int k = 0; k < v.world; ++k) sums[k][j] = r[u];
      }
    }
    signal_all(v, 1, tag, me);
    // 3. Every chunk's sums are here: normalize this block's rows of each.
    if (wait_all(v, 1, tag, deadline, me)) {
      for (int q = 0; q < v.world; ++q) {
        const P* s = staged<P>(v, me, parity, q);
        const Rows rows = chunk_rows(q);
        norm_rows<T, K>(p, rows.lo, rows.hi,
                        [&](int64_t r, int64_t u) { return s[r * units + u]; });
      }
    }
  }
  finish(v, call);
}

template <typename T, int K>
struct Kernels {
  template <ReduceKind Op>
  static void launch(bool two_shot, dim3 blocks, dim3 threads, cudaStream_t s,
                     const WorkspaceView& v, const Plan& p) {
    if (two_shot) {
      two_shot_norm_kernel<T, K, Op><<<blocks, threads, 0, s>>>(v, p);
    } else {
      one_shot_norm_kernel<T, K, Op><<<blocks, threads, 0, s>>>(v, p);
    }
  }
  template <ReduceKind Op>
  static void preload() {
    cudaFuncAttributes a;
    cudaFuncGetAttributes(&a, one_shot_norm_kernel<T, K, Op>);
    cudaFuncGetAttributes(&a, two_shot_norm_kernel<T, K, Op>);
  }
};

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
bool aligned8(const void* p) { return reinterpret_cast<uintptr_t>(p) % 8 == 0; }

using kernels::AllReduceAlgorithm;

// The all-reduce's rule (Note [one-shot limit per world]), "ll" only where every row is whole
// 8-byte units and every pointer 8-byte aligned.
AllReduceAlgorithm cuda_algorithm(const Plan& p, int64_t bytes, int world) {
  const int64_t size = bytes / std::max<int64_t>(1, p.rows * p.n);
  const bool units8 = size > 0 && p.n % (8 / size) == 0 && aligned8(p.in) &&
                      aligned8(p.residual) && aligned8(p.weight) && aligned8(p.out) &&
                      aligned8(p.residual_out);
  return kernels::cuda_all_reduce_algorithm(bytes, world, true, units8);
}

// Enqueues the kernel on `stream` for `rows` rows of n (the communicator holds them: checked).
void launch(Communicator& comm, std::string_view op, Plan plan, DType dtype,
            std::string_view reduce_op, void* stream) {
  const ElemType type = elem_type(dtype, op);
  const ReduceKind kind = reduce_kind(reduce_op, op);
  if (plan.rows == 0 || plan.n == 0) return;
  const int64_t size = int64_t(dtype_size(dtype));
  const int64_t bytes = plan.rows * plan.n * size;
  // The exchange is in the signature: ranks that chose differently (alignment differs per rank)
  // raise a disagreement instead of waiting on lines or flags nobody sends.
  const AllReduceAlgorithm algorithm = cuda_algorithm(plan, bytes, comm.group()->size());
  const bool ll = algorithm == AllReduceAlgorithm::one_shot_ll;
  const std::string name = ll ? fmt::format("{}/ll", op) : std::string(op);
  const CallWorkspace w =
      call_workspace(comm, op, {name, &dtype, reduce_op, uint64_t(plan.rows * plan.n)});
  SF_CHECK(size_t(bytes) <= w.max_bytes,
           "{}: {} rows of {} exceed the communicator's max_bytes {} (group '{}')", op, plan.rows,
           plan.n, w.max_bytes, comm.group()->name());
  const int world = w.view.world;
  // Note [fused all-reduce rms_norm on GPUs]: the exchange and the shape from the sizes only.
  const int64_t k16 = 16 / size, k8 = 8 / size;
  const bool vec = plan.n % k16 == 0 &&
                   aligned16(plan.in) && aligned16(plan.residual) && aligned16(plan.weight) &&
                   aligned16(plan.out) && aligned16(plan.residual_out);
  const bool two_shot = algorithm == AllReduceAlgorithm::two_shot;
  const int64_t units = ll ? plan.n / k8 : plan.n % k16 == 0 ? plan.n / k16 : plan.n;
  const int64_t want = (units + kRowCache - 1) / kRowCache;
  plan.tpr = want >= 1024 ? 1024 : int((want + 31) / 32 * 32);
  const int groups = std::max(1, std::min(8, 1024 / plan.tpr));
  const int64_t rows = two_shot ? (plan.rows + world - 1) / world : plan.rows;
  const int blocks = int(std::min<int64_t>((rows + groups - 1) / groups, std::min(w.sms, kMaxBlocks)));
  const auto s = static_cast<cudaStream_t>(stream);
  const dim3 grid(blocks), block(groups * plan.tpr);
  by_type_and_op(type, kind, [&](auto t, auto o) {
    using T = decltype(t);
    constexpr ReduceKind Op = decltype(o)::value;
    if (ll) {
      SF_CUDA_CHECK(launch_kernel(one_shot_ll_norm_kernel<T, Op>, grid, block, 0, s,
                                  current_launch().early, w.view, plan));
    } else if (vec) {
      Kernels<T, 16 / sizeof(T)>::template launch<Op>(two_shot, grid, block, s, w.view, plan);
    } else {
      Kernels<T, 1>::template launch<Op>(two_shot, grid, block, s, w.view, plan);
    }
  });
  SF_CUDA_CHECK(cudaGetLastError());
}

void fused(std::string_view op, const Tensor& input, const Tensor& residual_arg,
           const Tensor& weight_arg, double eps, std::string_view reduce_op,
           std::string_view group_name, const Tensor& out, const Tensor& residual_out) {
  auto group = group_for(op, group_name);
  if (group->spans_hosts())
    span::refuse(op, *group, "use an all-reduce, then the add and the RMSNorm");
  heap_of(input, op, "input", *group);
  SF_CHECK(input.dim() >= 1, "{}: argument 'input' ({}) needs at least one dim to normalize over",
           op, input.str());
  const int64_t n = input.shape().back();
  SF_CHECK(residual_arg.dtype() == input.dtype() && residual_arg.shape() == input.shape(),
           "{}: argument 'residual' is {} but must be like 'input' ({})", op, residual_arg.str(),
           input.str());
  SF_CHECK(weight_arg.dtype() == input.dtype() && weight_arg.numel() == n,
           "{}: weight {} must hold {} elements of {} (the last dim of input)", op,
           weight_arg.str(), n, dtype_name(input.dtype()));
  auto dense = [](const Tensor& t) { return t.is_contiguous() ? t : aten::clone(t); };
  const Tensor residual = dense(residual_arg);
  const Tensor weight = dense(weight_arg);
  DenseOut o(out), ro(residual_out);
  const Plan plan{input.raw_data(), residual.raw_data(), weight.raw_data(), o.data(), ro.data(),
                  n == 0 ? 0 : input.numel() / n, n, float(eps)};
  launch(communicator(group, input.nbytes()), op, plan, input.dtype(), reduce_op,
         current_stream());
  o.finish();
  ro.finish();
}

SYMMFLOW_LIBRARY_IMPL(symm_mem, cuda, m) {
  m.impl("fused_all_reduce_add_rms_norm", [](KernelCall& c) {
    fused("symm_mem::fused_all_reduce_add_rms_norm", c.arg(0).to_tensor(), c.arg(1).to_tensor(),
          c.arg(2).to_tensor(), c.arg(3).to_double(), c.arg(4).to_string(), c.arg(5).to_string(),
          c.out(0), c.out(1));
  });
  m.impl("fused_all_reduce_add_rms_norm_out", [](KernelCall& c) {
    fused("symm_mem::fused_all_reduce_add_rms_norm_out", c.arg(0).to_tensor(),
          c.arg(1).to_tensor(), c.arg(2).to_tensor(), c.arg(3).to_double(), c.arg(4).to_string(),
          c.arg(5).to_string(), c.arg(6).to_tensor(), c.arg(7).to_tensor());
  });
}

int preload() {
  every_type_and_op([](auto t, auto o) {
    using T = decltype(t);
    Kernels<T, 1>::template preload<decltype(o)::value>();
    Kernels<T, 16 / sizeof(T)>::template preload<decltype(o)::value>();
    cudaFuncAttributes a;
    cudaFuncGetAttributes(&a, one_shot_ll_norm_kernel<T, decltype(o)::value>);
  });
  return int(cudaGetLastError());
}

const bool kPreloaded = register_kernel_preload(&preload);

}  // namespace
}  // namespace symmflow::cuda
