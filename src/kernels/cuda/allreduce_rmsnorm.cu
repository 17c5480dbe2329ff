// The fused all-reduce + residual add + RMSNorm kernel (symm_mem::fused_all_reduce_add_rms_norm
// on GPUs, registered in fused_all_reduce_rms_norm.cpp, launched by
// Communicator::all_reduce_rms_norm): the one_shot exchange of Note [cuda all-reduce]
// (push the rows into every rank's staging, one flag per block, wait), then per row: reduce the
// ranks' copies in rank order (f32), round to T, add the residual and round (= aten::add.Tensor),
// store that as residual_out, sum its squares over the row, and store
// out = summed * (1 / sqrt(mean + eps)) * weight rounded to T (= aten::rms_norm), so the result is
// the composition's up to the order of the sum of squares. Block b handles rows
// [b * per, (b + 1) * per) on every rank (the launch shape depends on the sizes only).
#include "kernels/cuda/device_sync.cuh"

namespace symmflow::cuda {
namespace {

__device__ float block_sum(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = (int(blockDim.x) + 31) / 32;
  v = int(threadIdx.x) < warps ? partial[threadIdx.x] : 0.0f;
  if (warp == 0) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) partial[0] = v;
  }
  __syncthreads();
  const float total = partial[0];
  __syncthreads();
  return total;
}

template <typename T, ReduceKind Op>
__global__ void __launch_bounds__(1024)
    allreduce_rmsnorm_kernel(WorkspaceView v, RmsNormPlan p) {
  const uint32_t call = *static_cast<volatile uint32_t*>(v.calls);
  const uint32_t tag = call + 1;
  const int parity = int(call & 1);
  const uint64_t deadline = now_ns() + v.timeout_ns;
  const int me = v.rank;
  auto slot = [&](int rank, int src) {
    return reinterpret_cast<T*>(v.staging[rank] + (int64_t(parity) * v.world + src) * v.stage_bytes);
  };
  const T* in = static_cast<const T*>(p.in);
  const int64_t per = (p.rows + gridDim.x - 1) / gridDim.x;
  const int64_t lo = int64_t(blockIdx.x) * per;
  const int64_t hi = lo + per < p.rows ? lo + per : p.rows;
  for (int64_t i = lo * p.n + threadIdx.x; i < hi * p.n; i += blockDim.x) {
    const T x = in[i];
    for (int q = 0; q < v.world; ++q) slot(q, me)[i] = x;
  }
  signal_all(v, 0, tag, -1);
  if (wait_all(v, 0, tag, deadline, -1)) {
    const T* residual = static_cast<const T*>(p.residual);
    const T* weight = static_cast<const T*>(p.weight);
    T* out = static_cast<T*>(p.out);
    T* residual_out = static_cast<T*>(p.residual_out);
    for (int64_t r = lo; r < hi; ++r) {
      float squares = 0;
      for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) {
        const int64_t i = r * p.n + j;
        float acc = to_f(slot(me, 0)[i]);
        for (int s = 1; s < v.world; ++s) acc = combine<Op>(acc, to_f(slot(me, s)[i]));
        const T reduced = from_f<T>(Op == ReduceKind::avg ? acc / float(v.world) : acc);
        const T summed = from_f<T>(to_f(reduced) + to_f(residual[i]));
        residual_out[i] = summed;
        squares += to_f(summed) * to_f(summed);
      }
      const float scale = 1.0f / sqrtf(block_sum(squares) / float(p.n) + p.eps);
      for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) {
        const int64_t i = r * p.n + j;
        out[i] = from_f<T>(to_f(residual_out[i]) * scale * to_f(weight[j]));
      }
    }
  }
  finish(v, call);
}

template <typename T>
void launch_as(const WorkspaceView& v, const RmsNormPlan& p, ReduceKind op, const Launch& l,
               cudaStream_t s) {
  by_op(op, [&](auto tag) {
    allreduce_rmsnorm_kernel<T, decltype(tag)::value><<<l.blocks, l.threads, 0, s>>>(v, p);
  });
}

}  // namespace

int launch_allreduce_rmsnorm(const WorkspaceView& v, const RmsNormPlan& plan, ElemType type,
                             ReduceKind op, const Launch& l, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (type) {
    case ElemType::f32:
      launch_as<float>(v, plan, op, l, s);
      break;
    case ElemType::bf16:
      launch_as<__nv_bfloat16>(v, plan, op, l, s);
      break;
    case ElemType::f16:
      launch_as<__half>(v, plan, op, l, s);
      break;
  }
  return int(cudaGetLastError());
}

int preload_allreduce_rmsnorm_kernels() {
  cudaFuncAttributes a;
  for (ReduceKind op : {ReduceKind::sum, ReduceKind::avg, ReduceKind::max, ReduceKind::min}) {
    by_op(op, [&](auto tag) {
      constexpr ReduceKind k = decltype(tag)::value;
      cudaFuncGetAttributes(&a, allreduce_rmsnorm_kernel<float, k>);
      cudaFuncGetAttributes(&a, allreduce_rmsnorm_kernel<__nv_bfloat16, k>);
      cudaFuncGetAttributes(&a, allreduce_rmsnorm_kernel<__half, k>);
    });
  }
  return int(cudaGetLastError());
}

}  // namespace symmflow::cuda
