// cuda kernels of the collective matmuls (Note [collective matmuls] in
// src/ops/symm_mem/collective_matmul.cpp), with the communication behind the GEMMs:
//   fused_all_gather_matmul: a barrier; then, on this rank thread's copy stream, every rank's
//     A_shard pulled by the copy engine into its slot of A (this rank first, then r + 1, ...),
//     an event after each; on the compute stream, each slot's GEMMs (one per B, a batch of the
//     slot's rows per leading index) as soon as its event fires, so the copy engine moves the
//     next peer's rows while the SMs multiply these; a barrier (peers are done reading A_shard).
//   fused_matmul_reduce_scatter: a barrier; the GEMM of each chunk j (j from r + 1 on, this rank's
//     own last) written straight into slot r of rank j's partials (peer memory: the tiles cross
//     NVLink as the GEMM stores them, while the next chunk's GEMM runs); a barrier; this rank's W
//     slots summed in rank order (f32 accumulation) into out, one pointwise launch.
// Everything is enqueued on cuda::current_stream() (the copy stream forks from it and joins it
// again), so a plan's CUDA graph captures it whole. Floats only (the GEMMs'); shapes were checked
// by the shape functions when the call was bound; the symm args are checked here.
#include <cuda_runtime_api.h>

#include "kernels/cuda/gemm/blas.hpp"
#include "kernels/cuda/collectives/copy_stream.hpp"
#include "kernels/cuda/pointwise/program.hpp"
#include "kernels/cuda/collectives/spanning.hpp"
#include "kernels/cuda/collectives/symm_args.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

constexpr std::string_view kAllGatherMatmul = "symm_mem::fused_all_gather_matmul";
constexpr std::string_view kMatmulReduceScatter = "symm_mem::fused_matmul_reduce_scatter";

// A tensor viewed as `lead` batches of the rows [first, first + count) of each batch (a batch has
// `rows` rows of its last dim): the GEMM operand of one rank's chunk.
Tensor chunk_rows(const Tensor& t, int64_t lead, int64_t rows, int64_t first, int64_t count) {
  const int64_t n = t.size(-1);
  return t.as_strided({lead, count, n}, {rows * n, n, 1}, first * n);
}

// The leading index count before dim d and the rows of one leading index (dims d .. -2).
std::pair<int64_t, int64_t> lead_rows(const Tensor& t, int64_t d) {
  int64_t lead = 1, rows = 1;
  for (int64_t i = 0; i < t.dim() - 1; ++i) (i < d ? lead : rows) *= t.size(i);
  return {lead, rows};
}

thread_local CopyStream tls_copy;

void all_gather_matmul(KernelCall& c) {
  const Tensor& shard = c.arg(0).to_tensor();
  const std::vector<Tensor>& bs = c.arg(1).to_tensor_list();
  const int64_t d = wrap_dim(c.arg(2).to_int(), shard.dim(), "gather_dim");
  auto group = group_for(kAllGatherMatmul, c.arg(3).to_string());
  if (group->spans_hosts())
    span::refuse(kAllGatherMatmul, *group, "use all_gather_out, then the matmul");
  const DeviceHeap& heap = heap_of(shard, kAllGatherMatmul, "A_shard", *group);
  const int w = group->size(), r = group->rank();
  const Tensor& gathered = c.out(0);
  for (size_t i = 0; i <= bs.size(); ++i) {  // A and the products: planned buffers
    SF_CHECK(c.out(i).is_contiguous(), "{}: internal: results must be contiguous",
             kAllGatherMatmul);
  }
  const auto [lead, rows] = lead_rows(shard, d);  // rows of one rank's slab per leading index
  const size_t slab = size_t(rows * shard.size(-1)) * dtype_size(shard.dtype());
  auto main = static_cast<cudaStream_t>(current_stream());
  CopyStream& side = copy_stream();
  Communicator& comm = communicator(group, 0);
  comm.barrier(kAllGatherMatmul, main);
  SF_CUDA_CHECK(cudaEventRecord(side.event(0), main));
  SF_CUDA_CHECK(cudaStreamWaitEvent(side.stream, side.event(0), 0));
  for (int k = 0; k < w; ++k) {
    const int p = (r + k) % w;
    if (slab > 0) {
      SF_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(gathered.raw_data()) + size_t(p) * slab,
                                      slab * size_t(w), peer_ptr(heap, shard, p), slab, slab,
                                      size_t(lead), cudaMemcpyDeviceToDevice, side.stream));
    }
    SF_CUDA_CHECK(cudaEventRecord(side.event(1 + k), side.stream));
  }
  for (int k = 0; k < w; ++k) {
    const int p = (r + k) % w;
    SF_CUDA_CHECK(cudaStreamWaitEvent(main, side.event(1 + k), 0));
    const Tensor a = chunk_rows(gathered, lead, rows * w, p * rows, rows);
    for (size_t i = 0; i < bs.size(); ++i) {
      gemm_rows(kAllGatherMatmul, chunk_rows(c.out(i + 1), lead, rows * w, p * rows, rows), a,
                bs[i]);
    }
  }
  comm.barrier(kAllGatherMatmul, main);
}

void matmul_reduce_scatter(KernelCall& c) {
  const Tensor& partials = c.arg(0).to_tensor();
  const Tensor a = c.arg(1).to_tensor().is_contiguous() ? c.arg(1).to_tensor()
                                                         : aten::clone(c.arg(1).to_tensor());
  const Tensor& b = c.arg(2).to_tensor();
  const std::string& reduce_op = c.arg(3).to_string();
  const int64_t d = wrap_dim(c.arg(4).to_int(), a.dim(), "scatter_dim");
  auto group = group_for(kMatmulReduceScatter, c.arg(5).to_string());
  if (group->spans_hosts())
    span::refuse(kMatmulReduceScatter, *group, "use the matmul, then reduce_scatter_out");
  const DeviceHeap& heap = heap_of(partials, kMatmulReduceScatter, "partials", *group);
  const int w = group->size(), r = group->rank();
  const Tensor& out = c.out(0);
  const auto [lead, rows] = lead_rows(a, d);  // rows of the whole product per leading index
  const int64_t chunk = rows / w, n = b.size(1);
  const size_t slot_bytes = out.nbytes();
  auto main = static_cast<cudaStream_t>(current_stream());
  Communicator& comm = communicator(group, 0);
  comm.barrier(kMatmulReduceScatter, main);
  for (int k = 1; k <= w; ++k) {
    const int j = (r + k) % w;  // the rank that keeps chunk j; this rank's own chunk last
    void* slot = static_cast<char*>(peer_ptr(heap, partials, j)) + size_t(r) * slot_bytes;
    auto storage = std::make_shared<Storage>(slot, slot_bytes, out.device(), MemoryKind::regular);
    const Tensor dst = Tensor::from_storage(std::move(storage), 0, out.dtype(), {lead, chunk, n});
    gemm_rows(kMatmulReduceScatter, dst, chunk_rows(a, lead, rows, j * chunk, chunk), b);
  }
  comm.barrier(kMatmulReduceScatter, main);
  if (out.numel() == 0) return;
  ProgramBuilder p(out.shape());
  const int64_t slot = out.numel();
  const Strides dense = contiguous_strides(out.shape());
  int sum = p.load(partials.as_strided(out.shape(), dense, 0), DType::f32);
  for (int s = 1; s < w; ++s) {
    int x = p.load(partials.as_strided(out.shape(), dense, s * slot), DType::f32);
    sum = p.op(PwOp::add, sum, x, DType::f32);
  }
  if (reduce_op == "avg") sum = p.op(PwOp::div, sum, p.konst(w, DType::f32), DType::f32);
  p.store(out, sum);
  p.launch();
}

}  // namespace

CopyStream& copy_stream() {
  int device = 0;
  SF_CUDA_CHECK(cudaGetDevice(&device));
  if (tls_copy.stream && tls_copy.device == device) return tls_copy;
  check_not_capturing("creating the copy stream of the collective matmuls");
  // A thread that moved to another GPU leaves its old stream and events (a few, once).
  SF_CUDA_CHECK(cudaStreamCreateWithFlags(&tls_copy.stream, cudaStreamNonBlocking));
  for (cudaEvent_t& e : tls_copy.events)
    SF_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  tls_copy.device = device;
  return tls_copy;
}

SYMMFLOW_LIBRARY_IMPL(symm_mem, cuda, m) {
  m.impl("fused_all_gather_matmul", all_gather_matmul);
  m.impl("fused_matmul_reduce_scatter", matmul_reduce_scatter);
}

}  // namespace symmflow::cuda
