// Collectives of groups that span hosts: the exchange of every member's bytes and the all-reduce,
// flat or hierarchical (contract in spanning.hpp).
//
// Note [hierarchical all-reduce]: a spanning group of H hosts of L members each all-reduces n
// bytes either flat, one exchange in which every member sends its n bytes to all (each receives
// (H*L - 1) * n through the engine), or hierarchically: (1) after a barrier of the host group,
// member l of each host reduces slice l (n / L bytes) of its host's inputs, read from their
// memory; (2) the members of index l on every host exchange their slices through the engine and
// each reduces the H slices, in host order; (3) it writes the result into slice l of every host
// member's scratch (Group::span_scratch, memory of the host's members), and after a second host
// barrier each copies the whole result out of its scratch. Through the engine a member then
// receives (H - 1) * n / L bytes instead of (H*L - 1) * n, and all but n / L of its reading is in
// memory, at the cost of two host barriers; so small all-reduces (below
// SYMMFLOW_HIERARCHICAL_MIN_BYTES, a latency) go flat. The sum's order differs from the flat
// rank order (hosts' partial sums, then across hosts), identical on every member, so with
// SYMMFLOW_DETERMINISTIC=1 (results that do not depend on sizes) it is always flat. Hosts of
// unequal member counts, or one member per host, go flat too (kernels::hierarchical_all_reduce in
// src/kernels/algorithm.cpp, the rule explain prints too). The scratch of the next call is
// written only after that call's first host barrier, which every member passes after copying
// this call's result out. A member whose host barrier fails (its host's members disagree, a peer
// of its host is gone) still meets its partners on the other hosts, with the error instead of
// its slice (Group::fail_across), so they raise at once naming it rather than at the timeout.
#include "kernels/cpu/collectives/spanning.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "symmflow/kernels/algorithm.hpp"
#include "symmflow/runtime/heap.hpp"

namespace symmflow::cpu {

Exchanged::Exchanged(Group& g, const CollectiveCall& call, const void* mine, size_t bytes)
    : data_(g.exchange(call, std::string(static_cast<const char*>(mine), bytes))) {}

Exchanged::Exchanged(Group& g, const CollectiveCall& call, const Tensor& mine) {
  std::string bytes(mine.nbytes(), '\0');
  copy_from(bytes.data(), mine);
  data_ = g.exchange(call, std::move(bytes));
}

namespace {

// Slice l of n elements split into L near-equal contiguous slices.
void slice(int64_t n, int parts, int l, int64_t* begin, int64_t* len) {
  const int64_t base = n / parts, rem = n % parts;
  *begin = l * base + std::min<int64_t>(l, rem);
  *len = base + (l < rem ? 1 : 0);
}

void flat(const Reduction& red, const CollectiveCall& call, const SymmArg& in, int64_t numel,
          void* dst) {
  Group& g = *red.group;
  const size_t bytes = size_t(numel) * dtype_size(call.dtype);
  const Exchanged x(g, call, in.local(), bytes);
  if (numel == 0) return;
  RankPointers ptrs(g.size(), [&](int r) { return x.of(r); });
  red.fn(ptrs.at(0), g.size(), dst, numel, g.size());
}

void hierarchical(const Reduction& red, const CollectiveCall& call, const SymmArg& in,
                  int64_t numel, void* dst) {
  Group& g = *red.group;
  Group& host = g.host_group();
  const int L = host.size(), l = host.rank(), H = g.hosts();
  const size_t elem = dtype_size(call.dtype), bytes = size_t(numel) * elem;
  std::vector<int> member(static_cast<size_t>(L));  // host rank -> group rank
  for (int r = 0; r < g.size(); ++r)
    if (g.host_rank_of(r) >= 0) member[size_t(g.host_rank_of(r))] = r;
  try {
    host.barrier(kCollectiveChannel, call);
    // The scratch: grown alike by every host member (they agreed on the count at the barrier).
    if (!g.span_scratch || g.span_scratch->bytes() < bytes) {
      const size_t grown = g.span_scratch ? 2 * g.span_scratch->bytes() : 0;
      g.span_scratch = SymmetricHeap::allocate(g.host_group_ptr(), std::max(bytes, grown), call.op);
    }
  } catch (const Error& e) {
    // The partners on the other hosts wait for this rank in the exchange across: tell them.
    g.fail_across(call, e);
    throw;
  }
  int64_t begin, len;
  slice(numel, L, l, &begin, &len);
  std::string part(size_t(len) * elem, '\0');
  RankPointers hosts_inputs(L, [&](int i) { return in.peer(member[size_t(i)]); });
  // avg: sums at both levels, divided once by the group's size at the second (an integer average
  // of averages would truncate twice).
  if (len > 0) red.fn(hosts_inputs.at(begin * int64_t(elem)), L, part.data(), len, 1);
  const std::vector<std::string> parts = g.exchange_across(call, std::move(part));
  thread_local std::vector<std::byte> sum;
  sum.resize(std::max(sum.size(), size_t(len) * elem));
  if (len > 0) {
    RankPointers across(H, [&](int h) { return parts[size_t(h)].data(); });
    red.fn(across.at(0), H, sum.data(), len, g.size());
    for (int i = 0; i < L; ++i) {
      const int p = (l + i) % L;  // staggered: members write to different peers at once
      std::memcpy(static_cast<char*>(g.span_scratch->peer(p)) + begin * int64_t(elem), sum.data(),
                  size_t(len) * elem);  // a heap of the host group: host ranks
    }
  }
  host.barrier(kCollectiveChannel, call);
  if (bytes > 0) std::memcpy(dst, g.span_scratch->local(), bytes);
}

}  // namespace

void span_all_reduce(const Reduction& red, const CollectiveCall& call, const SymmArg& in,
                     int64_t numel, void* dst) {
  const int64_t bytes = numel * int64_t(dtype_size(call.dtype));
  const Group& g = *red.group;
  const kernels::SpanShape span{g.hosts(), g.host_group().size(), g.uniform()};
  if (kernels::hierarchical_all_reduce(bytes, span, nullptr))  // the rule explain prints
    hierarchical(red, call, in, numel, dst);
  else
    flat(red, call, in, numel, dst);
}

}  // namespace symmflow::cpu
