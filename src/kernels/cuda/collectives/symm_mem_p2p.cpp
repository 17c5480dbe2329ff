// cuda kernels of symm_mem point-to-point ops, signals, broadcast, barrier and the u32 writes over
// GPU symmetric memory, with the contract of the cpu kernels (kernels/cpu/collectives/p2p.cpp):
//   collective_permute_out(input, shift, group, out): rank r's input lands in the out of rank
//     (r + shift) mod W (pushed; barrier before and after, one kernel). collective_permute
//     allocates its symmetric staging with cuda::empty_symmetric (collective), so it cannot run
//     inside a CUDA graph capture; compiled plans use the out form.
//   put_signal / wait_signal: one kernel each (Note [cuda exchange]); not collective.
//   get(src, peer, group, out): a copy from the peer's src (no synchronisation, as on the cpu).
//   broadcast_(input, root, group): non-roots pull root's input between two barriers.
//   barrier(group, channel): a barrier kernel on the current stream. The op has no tensor; it runs
//     on the GPU when the rank thread is bound to one (ops/call.cpp).
//   stream_write_value32_ / memset32_: a fill kernel on the current stream (u32, contiguous).
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/cpu/collectives/args.hpp"
#include "kernels/cuda/collectives/collectives.hpp"
#include "kernels/cuda/collectives/spanning.hpp"
#include "kernels/cuda/collectives/symm_args.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

int checked_peer(std::string_view op, std::string_view arg, int64_t peer, const Group& g) {
  SF_CHECK(peer >= 0 && peer < g.size(), "{}: {} {} out of range for group '{}' of size {}", op,
           arg, peer, g.name(), g.size());
  return int(peer);
}

int checked_channel(std::string_view op, int64_t channel, const Group& g,
                    const Communicator& comm) {
  SF_CHECK(channel >= 0 && channel < comm.channels(),
           "{}: channel {} out of range for group '{}' (valid: 0..{}; set SYMMFLOW_SIGNAL_CHANNELS "
           "for more)",
           op, channel, g.name(), comm.channels() - 1);
  return int(channel);
}

constexpr std::string_view kSignalsInstead =
    "move data across hosts with a collective (collective_permute, all_gather_out, all_to_all), "
    "or make a group of the members of one host for signals and loads";

// `t` contiguous on this rank's GPU (a copy when it is not).
Tensor dense(const Tensor& t) { return t.is_contiguous() ? t : aten::clone(t); }

void permute_out(std::string_view op, const Tensor& input, int64_t shift,
                 std::string_view group_name, const Tensor& out) {
  auto group = group_for(op, group_name);
  const DeviceHeap& heap = heap_of(out, op, "out", *group);
  cpu::check_spec(op, "out", out, input.dtype(), input.shape(), "like 'input'");
  cpu::check_no_overlap(op, "out", out, "input", input);
  const int w = group->size();
  const int to = int(((group->rank() + shift) % w + w) % w);
  Tensor src = dense(input);
  if (group->spans_hosts())
    return span::permute(op, group, src.raw_data(), out.raw_data(), input.nbytes(), shift);
  Communicator::Copy c{src.raw_data(), peer_ptr(heap, out, to), input.nbytes()};
  communicator(group, 0).copy({&c, 1}, input.nbytes(), op, current_stream());
}

void put_signal(const Tensor& src, const Tensor& dst, int64_t peer, int64_t channel,
                std::string_view group_name) {
  constexpr std::string_view op = "symm_mem::put_signal";
  auto group = group_for(op, group_name);
  if (group->spans_hosts()) span::refuse(op, *group, kSignalsInstead);
  const DeviceHeap& heap = heap_of(dst, op, "dst", *group);
  SF_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel(),
           "{}: argument 'src' ({}) must have the dtype and number of elements of 'dst' ({})", op,
           src.str(), dst.str());
  const int p = checked_peer(op, "peer", peer, *group);
  Communicator& comm = communicator(group, 0);
  const int ch = checked_channel(op, channel, *group, comm);
  Tensor s = dense(src);
  comm.put_signal(s.raw_data(), peer_ptr(heap, dst, p), dst.nbytes(), p, ch, current_stream());
}

void wait_signal(const Tensor& dst, int64_t peer, int64_t channel, std::string_view group_name) {
  constexpr std::string_view op = "symm_mem::wait_signal";
  auto group = group_for(op, group_name);
  if (group->spans_hosts()) span::refuse(op, *group, kSignalsInstead);
  heap_of(dst, op, "dst", *group);
  const int p = checked_peer(op, "peer", peer, *group);
  Communicator& comm = communicator(group, 0);
  comm.wait_signal(p, checked_channel(op, channel, *group, comm), current_stream());
}

void get(const Tensor& src, int64_t peer, std::string_view group_name, const Tensor& out) {
  constexpr std::string_view op = "symm_mem::get";
  auto group = group_for(op, group_name);
  if (group->spans_hosts()) span::refuse(op, *group, kSignalsInstead);
  const DeviceHeap& heap = heap_of(src, op, "src", *group);
  cpu::check_spec(op, "out", out, src.dtype(), src.shape(), "like 'src'");
  const int p = checked_peer(op, "peer", peer, *group);
  DenseOut dst(out);
  if (src.nbytes() > 0) {
    SF_CUDA_CHECK(cudaMemcpyAsync(dst.data(), peer_ptr(heap, src, p), src.nbytes(),
                                  cudaMemcpyDefault,
                                  static_cast<cudaStream_t>(current_stream())));
  }
  dst.finish();
}

void broadcast(const Tensor& input, int64_t root, std::string_view group_name) {
  constexpr std::string_view op = "symm_mem::broadcast_";
  auto group = group_for(op, group_name);
  const DeviceHeap& heap = heap_of(input, op, "input", *group);
  const int r = checked_peer(op, "root", root, *group);
  if (group->spans_hosts()) return span::broadcast(op, group, input.raw_data(), input.nbytes(), r);
  Communicator::Copy c{peer_ptr(heap, input, r), input.raw_data(), input.nbytes()};
  const bool receives = group->rank() != r;
  communicator(group, 0).copy({&c, receives ? 1u : 0u}, input.nbytes(), op, current_stream());
}

void barrier(std::string_view group_name, int64_t channel) {
  constexpr std::string_view op = "symm_mem::barrier";
  auto group = group_for(op, group_name);
  if (group->spans_hosts()) {
    SF_CHECK(channel >= 0 && channel < group->channels(),
             "{}: channel {} out of range for group '{}' (valid: 0..{}; set "
             "SYMMFLOW_SIGNAL_CHANNELS for more)",
             op, channel, group->name(), group->channels() - 1);
    return span::barrier(op, group);
  }
  Communicator& comm = communicator(group, 0);
  checked_channel(op, channel, *group, comm);
  comm.barrier(op, current_stream());
}

void fill_u32(std::string_view op, const Tensor& t, int64_t offset, int64_t count, int64_t val) {
  SF_CHECK(t.dtype() == DType::u32 && t.is_contiguous(),
           "{}: argument 'input' ({}) must be a contiguous u32 tensor", op, t.str());
  SF_CHECK(val >= 0 && val <= int64_t(UINT32_MAX),
           "{}: val {} is out of the u32 range [0, 4294967295]", op, val);
  SF_CHECK(offset >= 0 && count >= 0 && offset <= t.numel() && count <= t.numel() - offset,
           "{}: offset {} and count {} out of bounds for 'input' of {} elements", op, offset, count,
           t.numel());
  SF_CUDA_CHECK(cudaError_t(launch_fill_u32(static_cast<uint32_t*>(t.raw_data()) + offset,
                                            uint32_t(val), count, current_stream())));
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(symm_mem, cuda, m) {
  m.impl("collective_permute", [](KernelCall& c) {
    const Tensor& input = c.arg(0).to_tensor();
    Tensor staging = cuda::empty_symmetric(input.shape(), input.dtype(), c.arg(2).to_string());
    permute_out("symm_mem::collective_permute", input, c.arg(1).to_int(), c.arg(2).to_string(),
                staging);
    aten::copy_(c.out(0), staging);
  });
  m.impl("collective_permute_out", [](KernelCall& c) {
    permute_out("symm_mem::collective_permute_out", c.arg(0).to_tensor(), c.arg(1).to_int(),
                c.arg(2).to_string(), c.arg(3).to_tensor());
  });
  m.impl("put_signal", [](KernelCall& c) {
    put_signal(c.arg(0).to_tensor(), c.arg(1).to_tensor(), c.arg(2).to_int(), c.arg(3).to_int(),
               c.arg(4).to_string());
  });
  m.impl("wait_signal", [](KernelCall& c) {
    wait_signal(c.arg(0).to_tensor(), c.arg(1).to_int(), c.arg(2).to_int(), c.arg(3).to_string());
  });
  m.impl("get", [](KernelCall& c) {
    get(c.arg(0).to_tensor(), c.arg(1).to_int(), c.arg(2).to_string(), c.arg(3).to_tensor());
  });
  m.impl("broadcast_", [](KernelCall& c) {
    broadcast(c.arg(0).to_tensor(), c.arg(1).to_int(), c.arg(2).to_string());
  });
  m.impl("barrier", [](KernelCall& c) { barrier(c.arg(0).to_string(), c.arg(1).to_int()); });
  m.impl("stream_write_value32_", [](KernelCall& c) {
    fill_u32("symm_mem::stream_write_value32_", c.arg(0).to_tensor(), c.arg(1).to_int(), 1,
             c.arg(2).to_int());
  });
  m.impl("memset32_", [](KernelCall& c) {
    fill_u32("symm_mem::memset32_", c.arg(0).to_tensor(), c.arg(1).to_int(), c.arg(3).to_int(),
             c.arg(2).to_int());
  });
}

}  // namespace symmflow::cuda
