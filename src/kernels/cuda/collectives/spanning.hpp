// The cuda symm_mem collectives of a group that spans hosts, through NCCL, flat (Note [nccl
// engine] in nccl.cpp): the op impls (symm_mem_ops.cpp, symm_mem_exchange.cpp, symm_mem_p2p.cpp,
// reduce_to_root.cu) call these when Group::spans_hosts(), after checking their arguments as for
// a group of one host. A spanning group's symmetric arguments live in memory of this host's
// members (Note [spanning groups] in runtime/group.hpp); these read only this rank's own. Each is
// enqueued on the current stream and is capturable once the group's NCCL communicator exists
// (made by the first call, outside a capture). Private to the cuda backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "symmflow/core/dtype.hpp"
#include "symmflow/runtime/cuda.hpp"
#include "symmflow/runtime/group.hpp"

namespace symmflow::cuda::span {

// out = reduce over members of in (n elements; f32, bf16, f16); in and out may be equal; `in`
// lies in `heap` (this group's). Flat through NCCL, or hierarchical where
// kernels::cuda_hierarchical_all_reduce says so (Note [hierarchical GPU all-reduce]).
void all_reduce(std::string_view op, const std::shared_ptr<Group>& g, const DeviceHeap& heap,
                const void* in, void* out, int64_t n, DType dtype, std::string_view reduce_op);
// The same, landing on `root` only (out is written there alone).
void reduce(std::string_view op, const std::shared_ptr<Group>& g, const void* in, void* out,
            int64_t n, DType dtype, std::string_view reduce_op, int root);
// out[o * chunk + i] = reduce over members p of member p's in[rank * chunk + o * row_stride + i]
// (the geometry of cpu::check_reduce_scatter): one NCCL reduce-scatter, after packing the rows
// into [world, outer, chunk] when outer > 1.
void reduce_scatter(std::string_view op, const std::shared_ptr<Group>& g, const void* in,
                    void* out, int64_t outer, int64_t chunk, int64_t row_stride, DType dtype,
                    std::string_view reduce_op);
// out: every member's `bytes` of in, in group order.
void all_gather(std::string_view op, const std::shared_ptr<Group>& g, const void* in, void* out,
                size_t bytes);
// Block p of out is block rank of member p's in (blocks of `block` bytes).
void all_to_all(std::string_view op, const std::shared_ptr<Group>& g, const void* in, void* out,
                size_t block);
// This rank's in lands in the out of member (rank + shift) mod world.
void permute(std::string_view op, const std::shared_ptr<Group>& g, const void* in, void* out,
             size_t bytes, int64_t shift);
// buf of every member = root's buf.
void broadcast(std::string_view op, const std::shared_ptr<Group>& g, void* buf, size_t bytes,
               int root);
// Makes the group's scratch of a hierarchical all-reduce at least `bytes` now (collective).
void prepare_scratch(const std::shared_ptr<Group>& g, size_t bytes);
// A barrier on the stream (a one-element all-reduce).
void barrier(std::string_view op, const std::shared_ptr<Group>& g);
// InvalidUsage: `op` has no path across hosts on GPUs yet; `instead` says what to use.
[[noreturn]] void refuse(std::string_view op, const Group& g, std::string_view instead);

}  // namespace symmflow::cuda::span
