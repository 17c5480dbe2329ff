// cuda kernels of symm_mem reduce-scatter, all-gather and all-to-all over GPU symmetric memory,
// with the contract of the cpu kernels (kernels/cpu/collectives/scatter_gather.cpp):
//   reduce_scatter_out(input, group, split_last_dim, output): sum in rank order (f32, bf16, f16
//     on the GPU); rank r gets chunk r of dim 0 (of the last dim when split_last_dim).
//     _low_contention_reduce_scatter(tensor, reduce_op, group): chunk r of dim 0, any reduce op.
//   all_gather_out(input, group, out) and _low_contention_all_gather: every rank's input
//     concatenated along dim 0, pulled from peers (any dtype).
//   all_to_all(input, group) and all_to_all_out(input, group, out): block p of out is block r of
//     rank p's input, as on the cpu (Note [equal all-to-all] in ops/symm_mem/defs.cpp): one
//     exchange copy of W segments pulled from peers (any dtype).
//   all_to_all_vdev: rows along dim 0 as on the cpu; the splits are read on the GPU, so a bad
//     split is reported by the next synchronize (every rank raises the same error, nothing copied).
//   multimem_all_gather_out: refused (needs multicast).
// Each runs as one kernel on the current stream: barrier, transfers, barrier (Note [cuda exchange]).
// Shapes and symmetry are checked on the host before anything is enqueued.
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/collectives/args.hpp"
#include "kernels/cuda/collectives/spanning.hpp"
#include "kernels/cuda/collectives/symm_args.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

void reduce_scatter(std::string_view op, const Tensor& input, std::string_view input_name,
                    std::string_view reduce_op, std::string_view group_name, bool split_last_dim,
                    const Tensor& output, std::string_view output_name) {
  auto group = group_for(op, group_name);
  const DeviceHeap& heap = heap_of(input, op, input_name, *group);
  const int w = group->size();
  const cpu::ScatterGeometry geo =
      cpu::check_reduce_scatter(op, input, input_name, w, split_last_dim, output, output_name);
  const int64_t offset = int64_t(group->rank()) * geo.chunk * int64_t(dtype_size(input.dtype()));
  if (group->spans_hosts()) {
    DenseOut dst(output);
    span::reduce_scatter(op, group, static_cast<const char*>(input.raw_data()) + offset,
                         dst.data(), geo.outer, geo.chunk, geo.row_stride, input.dtype(),
                         reduce_op);
    return dst.finish();
  }
  std::vector<const void*> srcs(static_cast<size_t>(w));
  for (int p = 0; p < w; ++p) srcs[size_t(p)] = static_cast<char*>(peer_ptr(heap, input, p)) + offset;
  DenseOut dst(output);
  communicator(group, 0).reduce_scatter(srcs, dst.data(), geo.outer, geo.chunk, geo.row_stride,
                                        input.dtype(), reduce_op, op, current_stream());
  dst.finish();
}

void all_gather(std::string_view op, const Tensor& input, std::string_view input_name,
                std::string_view group_name, const Tensor& out) {
  auto group = group_for(op, group_name);
  const DeviceHeap& heap = heap_of(input, op, input_name, *group);
  const int w = group->size();
  cpu::check_all_gather(op, input, input_name, w, out);
  const size_t bytes = input.nbytes();
  DenseOut dst(out);
  if (group->spans_hosts()) {
    span::all_gather(op, group, input.raw_data(), dst.data(), bytes);
    return dst.finish();
  }
  std::vector<Communicator::Copy> copies;
  for (int p = 0; p < w; ++p)
    copies.push_back({peer_ptr(heap, input, p), static_cast<char*>(dst.data()) + p * bytes, bytes});
  communicator(group, 0).copy(copies, bytes * size_t(w), op, current_stream());
  dst.finish();
}

void all_to_all(std::string_view op, const Tensor& input, std::string_view group_name,
                const Tensor& out) {
  auto group = group_for(op, group_name);
  const DeviceHeap& heap = heap_of(input, op, "input", *group);
  const int w = group->size();
  const size_t block = size_t(cpu::check_equal_all_to_all(op, input, w, out));
  const size_t mine = size_t(group->rank()) * block;
  DenseOut dst(out);
  if (group->spans_hosts()) {
    span::all_to_all(op, group, input.raw_data(), dst.data(), block);
    return dst.finish();
  }
  std::vector<Communicator::Copy> copies;
  for (int p = 0; p < w; ++p) {
    copies.push_back({static_cast<const char*>(peer_ptr(heap, input, p)) + mine,
                      static_cast<char*>(dst.data()) + size_t(p) * block, block});
  }
  communicator(group, 0).copy(copies, block * size_t(w), op, current_stream());
  dst.finish();
}

void all_to_all_vdev(const Tensor& input, const Tensor& out, const Tensor& in_splits,
                     const Tensor& out_splits_offsets, std::string_view group_name) {
  constexpr std::string_view op = "symm_mem::all_to_all_vdev";
  auto group = group_for(op, group_name);
  if (group->spans_hosts()) {
    span::refuse(op, *group, "use symm_mem::all_to_all (equal blocks), or a group per host");
  }
  const DeviceHeap& in_heap = heap_of(input, op, "input", *group);
  heap_of(out, op, "out", *group);
  const DeviceHeap& splits_heap = heap_of(in_splits, op, "in_splits", *group);
  heap_of(out_splits_offsets, op, "out_splits_offsets", *group);
  const int w = group->size();
  const int64_t row_bytes =
      cpu::check_all_to_all(op, input, out, in_splits, out_splits_offsets, w);
  std::vector<const int64_t*> splits(static_cast<size_t>(w));
  std::vector<const void*> inputs(static_cast<size_t>(w));
  for (int p = 0; p < w; ++p) {
    splits[size_t(p)] = static_cast<const int64_t*>(peer_ptr(splits_heap, in_splits, p));
    inputs[size_t(p)] = peer_ptr(in_heap, input, p);
  }
  communicator(group, 0).all_to_all(splits, inputs, out.raw_data(),
                                    static_cast<int64_t*>(out_splits_offsets.raw_data()),
                                    row_bytes, input.size(0), out.size(0), current_stream());
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(symm_mem, cuda, m) {
  m.impl("reduce_scatter_out", [](KernelCall& c) {
    reduce_scatter("symm_mem::reduce_scatter_out", c.arg(0).to_tensor(), "input", "sum",
                   c.arg(1).to_string(), c.arg(2).to_bool(), c.arg(3).to_tensor(), "output");
  });
  m.impl("_low_contention_reduce_scatter", [](KernelCall& c) {
    reduce_scatter("symm_mem::_low_contention_reduce_scatter", c.arg(0).to_tensor(), "tensor",
                   c.arg(1).to_string(), c.arg(2).to_string(), false, c.out(0), "result");
  });
  m.impl("all_gather_out", [](KernelCall& c) {
    all_gather("symm_mem::all_gather_out", c.arg(0).to_tensor(), "input", c.arg(1).to_string(),
               c.arg(2).to_tensor());
  });
  m.impl("_low_contention_all_gather", [](KernelCall& c) {
    all_gather("symm_mem::_low_contention_all_gather", c.arg(0).to_tensor(), "tensor",
               c.arg(1).to_string(), c.out(0));
  });
  m.impl("multimem_all_gather_out", [](KernelCall&) {
    invalid_usage("symm_mem::multimem_all_gather_out needs multicast (NVLink SHARP), which "
                  "symmflow does not use on these hosts; use symm_mem::all_gather_out");
  });
  m.impl("all_to_all", [](KernelCall& c) {
    all_to_all("symm_mem::all_to_all", c.arg(0).to_tensor(), c.arg(1).to_string(), c.out(0));
  });
  m.impl("all_to_all_out", [](KernelCall& c) {
    all_to_all("symm_mem::all_to_all_out", c.arg(0).to_tensor(), c.arg(1).to_string(),
               c.arg(2).to_tensor());
  });
  m.impl("all_to_all_vdev", [](KernelCall& c) {
    all_to_all_vdev(c.arg(0).to_tensor(), c.arg(1).to_tensor(), c.arg(2).to_tensor(),
                    c.arg(3).to_tensor(), c.arg(4).to_string());
  });
}

}  // namespace symmflow::cuda
