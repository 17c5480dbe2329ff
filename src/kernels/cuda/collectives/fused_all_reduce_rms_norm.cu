// symm_mem::fused_all_reduce_add_rms_norm and its _out variant on GPUs (Note [fused all-reduce
// add rms_norm] in src/ops/symm_mem/defs.cpp), the whole collective in one file (Note [one file
// per collective] in workspace_access.hpp): the kernel, its launch on the group's communicator
// workspace, the op's `impl` and the preload of its kernels.
//
// The kernel: the one_shot exchange of Note [cuda all-reduce] (push the rows into every rank's
// staging, one flag per block, wait), then per row: reduce the ranks' copies in rank order (f32),
// round to T, add the residual and round (= aten::add.Tensor), store that as residual_out, sum its
// squares over the row, and store out = summed * (1 / sqrt(mean + eps)) * weight rounded to T
// (= aten::rms_norm), so the result is the composition's up to the order of the sum of squares
// within a row (the only difference from the cpu kernel). Block b handles rows [b * per,
// (b + 1) * per) on every rank (the launch shape depends on the sizes only).
// Expects: `input` a GPU symmetric tensor of the op's group (heap_of names op and argument);
//   residual and weight of any layout (made contiguous first); f32, bf16 or f16; rows * n
//   elements of input at most what the communicator stages (it is made larger when not).
//   Strided outputs go through a contiguous stand-in.
// Refuses: what the shape function refuses (also checked here for the _out variant), dtypes other
//   than f32 / bf16 / f16 (naming op, dtype and backend), unknown reduce ops.
#include "kernels/cuda/collectives/device_sync.cuh"
#include "kernels/cuda/collectives/symm_args.hpp"
#include "kernels/cuda/collectives/workspace_access.hpp"
#include "runtime/cuda/check.hpp"
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
};

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
    allreduce_rmsnorm_kernel(WorkspaceView v, Plan p) {
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

// Enqueues the kernel on `stream` for `rows` rows of n (the communicator holds them: checked).
void launch(Communicator& comm, std::string_view op, const Plan& plan, DType dtype,
            std::string_view reduce_op, void* stream) {
  const ElemType type = elem_type(dtype, op);
  const ReduceKind kind = reduce_kind(reduce_op, op);
  if (plan.rows == 0 || plan.n == 0) return;
  const CallWorkspace w =
      call_workspace(comm, op, {op, &dtype, reduce_op, uint64_t(plan.rows * plan.n)});
  const int64_t bytes = plan.rows * plan.n * int64_t(dtype_size(dtype));
  SF_CHECK(size_t(bytes) <= w.max_bytes,
           "{}: {} rows of {} exceed the communicator's max_bytes {} (group '{}')", op, plan.rows,
           plan.n, w.max_bytes, comm.group()->name());
  Launch l;
  l.threads = plan.n >= 512 ? 512 : int((plan.n + 31) / 32 * 32);
  l.blocks = int(std::min<int64_t>(plan.rows, std::min(w.sms, kMaxBlocks)));
  by_type_and_op(type, kind, [&](auto t, auto o) {
    allreduce_rmsnorm_kernel<decltype(t), decltype(o)::value>
        <<<l.blocks, l.threads, 0, static_cast<cudaStream_t>(stream)>>>(w.view, plan);
  });
  SF_CUDA_CHECK(cudaGetLastError());
}

void fused(std::string_view op, const Tensor& input, const Tensor& residual_arg,
           const Tensor& weight_arg, double eps, std::string_view reduce_op,
           std::string_view group_name, const Tensor& out, const Tensor& residual_out) {
  auto group = group_for(op, group_name);
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
    cudaFuncAttributes a;
    cudaFuncGetAttributes(&a, allreduce_rmsnorm_kernel<decltype(t), decltype(o)::value>);
  });
  return int(cudaGetLastError());
}

const bool kPreloaded = register_kernel_preload(&preload);

}  // namespace
}  // namespace symmflow::cuda
