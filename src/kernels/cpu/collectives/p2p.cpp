// cpu kernels of symm_mem point-to-point ops, signals, broadcast, barrier and the u32 writes.
//
// Contract (OPS.md; mutating ops return ()):
//   collective_permute_out(input, shift, group, out): out symmetric; barrier (every receiver is
//     done with its out), rank r writes its input into the out of rank (r + shift) mod W, barrier.
//     So rank r receives rank (r - shift) mod W's input. collective_permute (functional, no
//     symmetric buffer) allocates a symmetric staging buffer with empty_symmetric (collective: all
//     ranks call it in the same order), runs the out form and copies it into its result.
//   put_signal(src, dst, peer, channel, group): copies src into peer's copy of dst, then raises
//     the signal (release); wait_signal(dst, peer, channel, group) consumes it (acquire), after
//     which the data is visible (Note [signal protocol] in group.hpp).
//   get(src, peer, group, out): reads peer's copy of src (no synchronisation: order it with
//     signals or barriers).
//   broadcast_(input, root, group): barrier, non-roots copy root's input, barrier.
//   barrier(group, channel): Group::barrier.
//   stream_write_value32_ / memset32_: u32 contiguous tensors; offset, count and value checked.
// On a group that spans hosts (Note [spanning groups]) permute and broadcast exchange through the
// bootstrap instead (spanning.hpp); put_signal, wait_signal and get reach members of this host
// only, and name both hosts otherwise.
#include <atomic>
#include <cstring>
#include <limits>

#include "kernels/cpu/collectives/args.hpp"
#include "kernels/cpu/collectives/spanning.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

constexpr std::string_view kPermute = "symm_mem::collective_permute";
constexpr std::string_view kPermuteOut = "symm_mem::collective_permute_out";
constexpr std::string_view kPutSignal = "symm_mem::put_signal";
constexpr std::string_view kWaitSignal = "symm_mem::wait_signal";
constexpr std::string_view kGet = "symm_mem::get";
constexpr std::string_view kBroadcast = "symm_mem::broadcast_";
constexpr std::string_view kBarrier = "symm_mem::barrier";
constexpr std::string_view kWriteValue = "symm_mem::stream_write_value32_";
constexpr std::string_view kMemset = "symm_mem::memset32_";

int checked_peer(std::string_view op, std::string_view arg, int64_t peer, const Group& g) {
  SF_CHECK(peer >= 0 && peer < g.size(), "{}: {} {} out of range for group '{}' of size {}", op,
           arg, peer, g.name(), g.size());
  return int(peer);
}

void permute_out_impl(std::string_view op, const Tensor& input, int64_t shift, Group& g,
                      const Tensor& out) {
  SymmArg o(out, op, "out", g);
  check_spec(op, "out", out, input.dtype(), input.shape(), "like 'input'");
  check_no_overlap(op, "out", out, "input", input);
  const int w = g.size();
  const int to = int(((g.rank() + shift) % w + w) % w);
  fingerprint(g, op, input.dtype(), input.numel(), fmt::format("shift={}", shift));
  const CollectiveCall call{op, {}, input.dtype(), input.numel(), "shift", shift};
  if (g.spans_hosts()) {  // receive from rank - shift what it sent
    const Exchanged x(g, call, input);
    const int from = int(((g.rank() - shift) % w + w) % w);
    if (input.nbytes() > 0) std::memcpy(o.local(), x.of(from), input.nbytes());
    return;
  }
  g.barrier(kCollectiveChannel, call);
  copy_from(o.peer(to), input);
  g.barrier(kCollectiveChannel, call);
}

void permute_impl(const Tensor& input, int64_t shift, Group& g, const Tensor& result) {
  Tensor staging = empty_symmetric(input.shape(), input.dtype(), g.name());
  permute_out_impl(kPermute, input, shift, g, staging);
  copy_into(result, staging.raw_data());
}

void put_signal_impl(const Tensor& src, const Tensor& dst, int64_t peer, int64_t channel,
                     Group& g) {
  constexpr std::string_view op = kPutSignal;
  SymmArg d(dst, op, "dst", g);
  SF_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel(),
           "{}: argument 'src' ({}) must have the dtype and number of elements of 'dst' ({})", op,
           src.str(), dst.str());
  int p = checked_peer(op, "peer", peer, g);
  SF_CHECK(channel >= 0 && channel < g.channels(),
           "{}: channel {} out of range for group '{}' (valid: 0..{}; set SYMMFLOW_SIGNAL_CHANNELS "
           "for more)",
           op, channel, g.name(), g.channels() - 1);
  g.check_alive(op);
  if (g.spans_hosts()) g.host_peer(p, op);  // raises for a member of another host
  copy_from(d.peer(p), src);
  g.put_signal(p, int(channel), op);
}

void wait_signal_impl(const Tensor& dst, int64_t peer, int64_t channel, Group& g) {
  constexpr std::string_view op = kWaitSignal;
  SymmArg d(dst, op, "dst", g);
  int p = checked_peer(op, "peer", peer, g);
  SF_CHECK(channel >= 0 && channel < g.channels(),
           "{}: channel {} out of range for group '{}' (valid: 0..{}; set SYMMFLOW_SIGNAL_CHANNELS "
           "for more)",
           op, channel, g.name(), g.channels() - 1);
  g.wait_signal(p, int(channel), op);
}

void get_impl(const Tensor& src, int64_t peer, Group& g, const Tensor& out) {
  constexpr std::string_view op = kGet;
  SymmArg s(src, op, "src", g);
  check_spec(op, "out", out, src.dtype(), src.shape(), "like 'src'");
  int p = checked_peer(op, "peer", peer, g);
  g.check_alive(op);
  if (g.spans_hosts()) g.host_peer(p, op);  // raises for a member of another host
  copy_into(out, s.peer(p));
}

void broadcast_impl(const Tensor& input, int64_t root, Group& g) {
  constexpr std::string_view op = kBroadcast;
  SymmArg in(input, op, "input", g);
  int r = checked_peer(op, "root", root, g);
  fingerprint(g, op, input.dtype(), input.numel(), fmt::format("root={}", root));
  const CollectiveCall call{op, {}, input.dtype(), input.numel(), "root", root};
  if (g.spans_hosts()) {  // the root's bytes alone
    const bool root_here = g.rank() == r;
    const Exchanged x(g, call, in.local(), root_here ? input.nbytes() : 0);
    if (!root_here && input.nbytes() > 0) std::memcpy(in.local(), x.of(r), input.nbytes());
    return;
  }
  g.barrier(kCollectiveChannel, call);
  if (g.rank() != r && input.nbytes() > 0) std::memcpy(in.local(), in.peer(r), input.nbytes());
  g.barrier(kCollectiveChannel, call);
}

void barrier_impl(Group& g, int64_t channel) {
  constexpr std::string_view op = kBarrier;
  SF_CHECK(channel >= 0 && channel < g.channels(),
           "{}: channel {} out of range for group '{}' (valid: 0..{}; set SYMMFLOW_SIGNAL_CHANNELS "
           "for more)",
           op, channel, g.name(), g.channels() - 1);
  fingerprint(g, op, DType::u32, 0, fmt::format("channel={}", channel));
  g.barrier(int(channel), CollectiveCall(op, {}, DType::u32, 0));
}

uint32_t* checked_u32(std::string_view op, const Tensor& t, int64_t offset, int64_t count,
                      int64_t val) {
  SF_CHECK(t.dtype() == DType::u32 && t.is_contiguous(),
           "{}: argument 'input' ({}) must be a contiguous u32 tensor", op, t.str());
  SF_CHECK(val >= 0 && val <= int64_t(std::numeric_limits<uint32_t>::max()),
           "{}: val {} is out of the u32 range [0, 4294967295]", op, val);
  SF_CHECK(offset >= 0 && count >= 0 && offset <= t.numel() && count <= t.numel() - offset,
           "{}: offset {} and count {} out of bounds for 'input' of {} elements", op, offset, count,
           t.numel());
  return static_cast<uint32_t*>(t.raw_data()) + offset;
}

SYMMFLOW_LIBRARY_IMPL(symm_mem, cpu, m) {
  // Note [prepared collectives] (args.hpp): the group from the launch record.
  m.impl("collective_permute", [](KernelCall& c) {
    permute_impl(c.arg(0).to_tensor(), c.arg(1).to_int(), call_group(c, kPermute, 2), c.out(0));
  });
  m.impl("collective_permute_out", [](KernelCall& c) {
    permute_out_impl(kPermuteOut, c.arg(0).to_tensor(), c.arg(1).to_int(),
                     call_group(c, kPermuteOut, 2), c.arg(3).to_tensor());
  });
  m.impl("put_signal", [](KernelCall& c) {
    put_signal_impl(c.arg(0).to_tensor(), c.arg(1).to_tensor(), c.arg(2).to_int(),
                    c.arg(3).to_int(), call_group(c, kPutSignal, 4));
  });
  m.impl("wait_signal", [](KernelCall& c) {
    wait_signal_impl(c.arg(0).to_tensor(), c.arg(1).to_int(), c.arg(2).to_int(),
                     call_group(c, kWaitSignal, 3));
  });
  m.impl("get", [](KernelCall& c) {
    get_impl(c.arg(0).to_tensor(), c.arg(1).to_int(), call_group(c, kGet, 2),
             c.arg(3).to_tensor());
  });
  m.impl("broadcast_", [](KernelCall& c) {
    broadcast_impl(c.arg(0).to_tensor(), c.arg(1).to_int(), call_group(c, kBroadcast, 2));
  });
  m.impl("barrier", [](KernelCall& c) {
    barrier_impl(call_group(c, kBarrier, 0), c.arg(1).to_int());
  });
  m.impl("stream_write_value32_", [](KernelCall& c) {
    const Tensor& t = c.arg(0).to_tensor();
    uint32_t* p = checked_u32(kWriteValue, t, c.arg(1).to_int(), 1, c.arg(2).to_int());
    // A flag others may poll: publish what this rank wrote before it.
    std::atomic_ref<uint32_t>(*p).store(uint32_t(c.arg(2).to_int()), std::memory_order_release);
  });
  m.impl("memset32_", [](KernelCall& c) {
    const Tensor& t = c.arg(0).to_tensor();
    int64_t count = c.arg(3).to_int();
    uint32_t* p = checked_u32(kMemset, t, c.arg(1).to_int(), count, c.arg(2).to_int());
    uint32_t v = uint32_t(c.arg(2).to_int());
    for (int64_t i = 0; i < count; ++i) p[i] = v;
  });
}

}  // namespace
}  // namespace symmflow::cpu
