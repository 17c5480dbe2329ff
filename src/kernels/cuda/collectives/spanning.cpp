// The cuda collectives of groups that span hosts, through NCCL (spanning.hpp, Note [nccl engine]
// in nccl.cpp). Flat: every member takes part in one NCCL call of the whole group. The rule that
// explain prints is kernels::spanning_algorithm (src/kernels/algorithm.cpp).
//
// Note [hierarchical GPU all-reduce]: with L members on each of H hosts, an all-reduce of n
// elements (n a multiple of L) may instead run as (1) a reduce-scatter inside each host over
// symmetric memory (the host group's cuda::Communicator: member l reads slice l of its host's
// inputs from their GPUs and writes the host's partial result into slice l of its scratch, a
// DeviceHeap of the group, so of its host), (2) an NCCL all-reduce of that slice among the
// members of index l on every host (nccl::cross, split from the group's communicator), in place,
// and (3) an all-gather inside the host: each member copies slice p of member p's scratch into
// its output. Across hosts each member then moves n / L elements instead of n, the rest over
// NVLink. avg averages in both steps (over L, then over H). The scratch of the next call is
// written only after the trailing barrier of this call's all-gather. Off by default
// (SYMMFLOW_CUDA_HIERARCHICAL_MIN_BYTES = 0) until measured against NCCL flat on two hosts of two
// GPUs or more; kernels::cuda_hierarchical_all_reduce is the rule, explain prints it.
#include "kernels/cuda/collectives/spanning.hpp"

#include <algorithm>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "kernels/cuda/collectives/nccl.hpp"
#include "kernels/cuda/collectives/workspace_access.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/kernels/algorithm.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/core/tensor.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::cuda::span {
namespace {

// NCCL's order of a sum depends on the size and its choice of algorithm: SYMMFLOW_DETERMINISTIC=1
// (results that do not depend on the batch) refuses its reductions rather than break the promise.
void check_order(std::string_view op, const Group& g) {
  SF_CHECK(!tunables().deterministic,
           "{}: group '{}' spans {} hosts and SYMMFLOW_DETERMINISTIC=1 is set, but NCCL, which "
           "reduces across hosts on GPUs, adds in an order that depends on the size (unset it, "
           "or reduce in groups of one host)",
           op, g.name(), g.hosts());
}

struct Scratch {
  std::shared_ptr<Group> group;
  std::shared_ptr<DeviceHeap> heap;
};
thread_local std::vector<Scratch> tls_scratch;

// The group's scratch of at least `bytes` (collective when it must grow: every member's call has
// the same size).
const DeviceHeap& scratch(const std::shared_ptr<Group>& g, size_t bytes, std::string_view op) {
  auto it = std::find_if(tls_scratch.begin(), tls_scratch.end(),
                         [&](const Scratch& s) { return s.group == g; });
  if (it != tls_scratch.end() && it->heap->bytes() >= bytes) return *it->heap;
  check_not_capturing("growing the scratch of a hierarchical all-reduce");
  if (it == tls_scratch.end()) it = tls_scratch.insert(tls_scratch.end(), {g, nullptr});
  const size_t grown = it->heap ? 2 * it->heap->bytes() : 0;
  it->heap.reset();
  it->heap = DeviceHeap::allocate(g, std::max(bytes, grown), op);
  return *it->heap;
}

void* at(const DeviceHeap& heap, int group_rank, size_t offset) {
  return static_cast<char*>(heap.peer(group_rank)) + offset;
}

// Note [hierarchical GPU all-reduce].
void hierarchical(std::string_view op, const std::shared_ptr<Group>& g, const DeviceHeap& heap,
                  const void* in, void* out, int64_t n, DType dtype, std::string_view reduce_op) {
  const int L = g->host_group().size(), l = g->host_rank_of(g->rank());
  const size_t es = dtype_size(dtype), slice = size_t(n / L) * es;
  const size_t in_offset =
      size_t(static_cast<const char*>(in) - static_cast<const char*>(heap.local()));
  std::vector<int> member(static_cast<size_t>(L));  // host rank -> group rank
  for (int r = 0; r < g->size(); ++r)
    if (g->host_rank_of(r) >= 0) member[size_t(g->host_rank_of(r))] = r;
  const DeviceHeap& s = scratch(g, size_t(n) * es, op);
  nccl::Comm& across = nccl::cross(g, op);
  Communicator& host = communicator(g->host_group_ptr(), 0);
  std::vector<const void*> srcs(static_cast<size_t>(L));
  for (int p = 0; p < L; ++p)
    srcs[size_t(p)] = at(heap, member[size_t(p)], in_offset + size_t(l) * slice);
  void* mine = at(s, g->rank(), size_t(l) * slice);
  host.reduce_scatter(srcs, mine, 1, n / L, n / L, dtype, reduce_op, op, current_stream());
  across.all_reduce(mine, mine, n / L, dtype, reduce_kind(reduce_op, op), op, current_stream());
  std::vector<Communicator::Copy> copies;
  for (int p = 0; p < L; ++p)
    copies.push_back({at(s, member[size_t(p)], size_t(p) * slice),
                      static_cast<char*>(out) + size_t(p) * slice, slice});
  host.copy(copies, slice * size_t(L), op, current_stream());
}

}  // namespace

void prepare_scratch(const std::shared_ptr<Group>& g, size_t bytes) {
  scratch(g, bytes, "Executable");
}

void refuse(std::string_view op, const Group& g, std::string_view instead) {
  invalid_usage("{}: group '{}' spans {} hosts, and on GPUs this op has no path across hosts yet "
                "(its collectives go through NCCL: Note [nccl engine]); {}",
                op, g.name(), g.hosts(), instead);
}

void all_reduce(std::string_view op, const std::shared_ptr<Group>& g, const DeviceHeap& heap,
                const void* in, void* out, int64_t n, DType dtype, std::string_view reduce_op) {
  const ReduceKind red = reduce_kind(reduce_op, op);
  elem_type(dtype, op);
  check_order(op, *g);
  if (n == 0) return;
  const kernels::SpanShape shape{g->hosts(), g->host_group().size(), g->uniform()};
  if (kernels::cuda_hierarchical_all_reduce(int64_t(n) * int64_t(dtype_size(dtype)), shape,
                                            nullptr)) {
    return hierarchical(op, g, heap, in, out, n, dtype, reduce_op);  // raises without a split
  }
  nccl::comm(g, op).all_reduce(in, out, n, dtype, red, op, current_stream());
}

void reduce(std::string_view op, const std::shared_ptr<Group>& g, const void* in, void* out,
            int64_t n, DType dtype, std::string_view reduce_op, int root) {
  const ReduceKind red = reduce_kind(reduce_op, op);
  elem_type(dtype, op);
  check_order(op, *g);
  if (n == 0) return;
  nccl::comm(g, op).reduce(in, out, n, dtype, red, root, op, current_stream());
}

void reduce_scatter(std::string_view op, const std::shared_ptr<Group>& g, const void* in,
                    void* out, int64_t outer, int64_t chunk, int64_t row_stride, DType dtype,
                    std::string_view reduce_op) {
  const ReduceKind red = reduce_kind(reduce_op, op);
  elem_type(dtype, op);
  check_order(op, *g);
  if (outer * chunk == 0) return;
  nccl::Comm& c = nccl::comm(g, op);
  const int w = g->size();
  const size_t es = dtype_size(dtype);
  // The input's chunk of member p for every row o: in + (p * chunk + o * row_stride) elements.
  const char* base = static_cast<const char*>(in) - size_t(g->rank()) * size_t(chunk) * es;
  if (outer == 1) {
    c.reduce_scatter(base, out, chunk, dtype, red, op, current_stream());
    return;
  }
  int device = 0;
  SF_CUDA_CHECK(cudaGetDevice(&device));
  Tensor packed = Tensor::uninitialized({w, outer, chunk}, dtype, Device::cuda(device));
  auto stream = static_cast<cudaStream_t>(current_stream());
  for (int p = 0; p < w; ++p) {
    SF_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(packed.raw_data()) +
                                        size_t(p) * size_t(outer * chunk) * es,
                                    size_t(chunk) * es, base + size_t(p) * size_t(chunk) * es,
                                    size_t(row_stride) * es, size_t(chunk) * es, size_t(outer),
                                    cudaMemcpyDeviceToDevice, stream));
  }
  c.reduce_scatter(packed.raw_data(), out, outer * chunk, dtype, red, op, stream);
}

void all_gather(std::string_view op, const std::shared_ptr<Group>& g, const void* in, void* out,
                size_t bytes) {
  if (bytes == 0) return;
  nccl::comm(g, op).all_gather(in, out, bytes, op, current_stream());
}

void all_to_all(std::string_view op, const std::shared_ptr<Group>& g, const void* in, void* out,
                size_t block) {
  if (block == 0) return;
  const int w = g->size();
  std::vector<nccl::Transfer> sends, receives;
  for (int p = 0; p < w; ++p) {
    sends.push_back({static_cast<const char*>(in) + size_t(p) * block, nullptr, block, p});
    receives.push_back({nullptr, static_cast<char*>(out) + size_t(p) * block, block, p});
  }
  nccl::comm(g, op).exchange(sends, receives, op, current_stream());
}

void permute(std::string_view op, const std::shared_ptr<Group>& g, const void* in, void* out,
             size_t bytes, int64_t shift) {
  if (bytes == 0) return;
  const int w = g->size(), r = g->rank();
  const int s = int(((shift % w) + w) % w);
  const nccl::Transfer send{in, nullptr, bytes, (r + s) % w};
  const nccl::Transfer receive{nullptr, out, bytes, (r - s + w) % w};
  nccl::comm(g, op).exchange({&send, 1}, {&receive, 1}, op, current_stream());
}

void broadcast(std::string_view op, const std::shared_ptr<Group>& g, void* buf, size_t bytes,
               int root) {
  if (bytes == 0) return;
  nccl::comm(g, op).broadcast(buf, bytes, root, op, current_stream());
}

void barrier(std::string_view op, const std::shared_ptr<Group>& g) {
  int device = 0;
  SF_CUDA_CHECK(cudaGetDevice(&device));
  Tensor one = Tensor::uninitialized({1}, DType::f32, Device::cuda(device));
  SF_CUDA_CHECK(cudaMemsetAsync(one.raw_data(), 0, sizeof(float),
                                static_cast<cudaStream_t>(current_stream())));
  nccl::comm(g, op).all_reduce(one.raw_data(), one.raw_data(), 1, DType::f32, ReduceKind::sum, op,
                               current_stream());
}

}  // namespace symmflow::cuda::span

namespace symmflow::cuda {
void prepare_spanning(const std::shared_ptr<Group>& group, size_t bytes) {
  nccl::comm(group, "Executable");
  // Note [hierarchical GPU all-reduce]: what its calls need, made before a capture.
  const kernels::SpanShape shape{group->hosts(), group->host_group().size(), group->uniform()};
  if (tunables().cuda_hierarchical_min_bytes > 0 && shape.uniform && shape.per_host > 1) {
    nccl::cross(group, "Executable");
    span::prepare_scratch(group, bytes);
    communicator(group->host_group_ptr(), 0);
  }
}
void synchronize_spanning(void* stream, std::string_view op) { nccl::wait(stream, op); }
void check_spanning(const std::shared_ptr<Group>& group, std::string_view op) {
  nccl::comm(group, op).check_usable(op);
}
}  // namespace symmflow::cuda
