// symm_mem::reduce_out on GPUs (Note [reduce to root] in src/ops/symm_mem/defs.cpp), the whole
// collective in this file (Note [one file per collective] in workspace_access.hpp).
//
// The kernel is the one_shot exchange of Note [cuda all-reduce] aimed at one rank: every rank
// pushes its input into the root's staging only (slot of its rank, parity of the call), every
// block signals every rank and waits for every rank, then the root reduces the copies in rank
// order in f32 and rounds once, as the cpu kernel and one_shot_all_reduce do (equal bits for
// sum, max and min; avg divides in f32). Non-roots move W times fewer bytes than an all-reduce
// and write nothing of out. Block b handles the same elements on every rank.
// Expects: `input` a GPU symmetric tensor of the group (heap_of names op and argument), out of
//   any layout on this rank's GPU (a strided out goes through a contiguous stand-in); f32, bf16,
//   f16.
// Refuses (before anything is enqueued): a root outside the group, out not like input, other
//   dtypes (naming op, dtype and backend), unknown reduce ops.
#include <optional>

#include "kernels/cuda/collectives/device_sync.cuh"
#include "kernels/cuda/collectives/spanning.hpp"
#include "kernels/cuda/collectives/symm_args.hpp"
#include "kernels/cuda/collectives/workspace_access.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

struct Plan {
  const void* in = nullptr;
  void* out = nullptr;  // the root's; null elsewhere
  int64_t n = 0;
  int root = 0;
};

template <typename T, ReduceKind Op>
__global__ void __launch_bounds__(512) reduce_to_root_kernel(WorkspaceView v, Plan p) {
  const auto [call, tag, parity, deadline] = begin_call(v);
  auto slot = [&](int src) {
    return reinterpret_cast<T*>(v.staging[p.root] +
                                (int64_t(parity) * v.world + src) * v.stage_bytes);
  };
  const int64_t per = (p.n + gridDim.x - 1) / gridDim.x;
  const int64_t lo = int64_t(blockIdx.x) * per;
  const int64_t hi = lo + per < p.n ? lo + per : p.n;
  const T* in = static_cast<const T*>(p.in);
  T* mine = slot(v.rank);
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) mine[i] = in[i];
  signal_all(v, 0, tag, -1);
  if (wait_all(v, 0, tag, deadline, -1) && v.rank == p.root) {
    T* out = static_cast<T*>(p.out);
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      float acc = to_f(slot(0)[i]);
      for (int s = 1; s < v.world; ++s) acc = combine<Op>(acc, to_f(slot(s)[i]));
      out[i] = from_f<T>(Op == ReduceKind::avg ? acc / float(v.world) : acc);
    }
  }
  finish(v, call);
}

void reduce_out(const Tensor& input, int64_t root, std::string_view reduce_op,
                std::string_view group_name, const Tensor& out) {
  constexpr std::string_view op = "symm_mem::reduce_out";
  auto group = group_for(op, group_name);
  heap_of(input, op, "input", *group);
  SF_CHECK(root >= 0 && root < group->size(), "{}: root {} out of range for group '{}' of size {}",
           op, root, group->name(), group->size());
  SF_CHECK(out.dtype() == input.dtype() && out.shape() == input.shape(),
           "{}: argument 'out' is {} but must be like 'input' ({})", op, out.str(), input.str());
  const ElemType type = elem_type(input.dtype(), op);
  const ReduceKind kind = reduce_kind(reduce_op, op);
  if (input.numel() == 0) return;
  if (group->spans_hosts()) {  // Note [nccl engine]: NCCL's reduce, out written on the root only
    std::optional<DenseOut> d;
    if (group->rank() == int(root)) d.emplace(out);
    span::reduce(op, group, input.raw_data(), d ? d->data() : nullptr, input.numel(),
                 input.dtype(), reduce_op, int(root));
    if (d) d->finish();
    return;
  }
  Communicator& comm = communicator(group, input.nbytes());
  const DType dtype = input.dtype();
  const CallWorkspace w =
      call_workspace(comm, op, {op, &dtype, reduce_op, uint64_t(input.numel()), root});
  const bool is_root = group->rank() == int(root);
  std::optional<DenseOut> dense;
  if (is_root) dense.emplace(out);
  const Plan plan{input.raw_data(), is_root ? dense->data() : nullptr, input.numel(), int(root)};
  Launch l;
  l.threads = 512;
  l.blocks = blocks_for(plan.n, l.threads, 2, w.sms);
  by_type_and_op(type, kind, [&](auto t, auto o) {
    reduce_to_root_kernel<decltype(t), decltype(o)::value>
        <<<l.blocks, l.threads, 0, static_cast<cudaStream_t>(current_stream())>>>(w.view, plan);
  });
  SF_CUDA_CHECK(cudaGetLastError());
  if (dense) dense->finish();
}

SYMMFLOW_LIBRARY_IMPL(symm_mem, cuda, m) {
  m.impl("reduce_out", [](KernelCall& c) {
    reduce_out(c.arg(0).to_tensor(), c.arg(1).to_int(), c.arg(2).to_string(),
               c.arg(3).to_string(), c.arg(4).to_tensor());
  });
}

int preload() {
  every_type_and_op([](auto t, auto o) {
    cudaFuncAttributes a;
    cudaFuncGetAttributes(&a, reduce_to_root_kernel<decltype(t), decltype(o)::value>);
  });
  return int(cudaGetLastError());
}

const bool kPreloaded = register_kernel_preload(&preload);

}  // namespace
}  // namespace symmflow::cuda
