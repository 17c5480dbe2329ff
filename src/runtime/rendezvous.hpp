// The validated rendezvous of every symmetric allocation (host heaps in heap.cpp, GPU heaps in
// cuda/heap.cpp), and the check that the members of an all-gather are in the same collective
// (both bootstraps). Private header of the runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "symmflow/core/error.hpp"

#include "symmflow/runtime/group.hpp"

namespace symmflow {

// Collective over `group`: every member presents (its next allocation number, bytes); when any
// member differs, every member raises the same InvalidUsage listing each rank's request. Returns
// the allocation number.
uint64_t validate_symmetric_request(Group& group, size_t bytes, std::string_view op);

// Raises InvalidUsage listing every member's key when keys[i] (what member i was doing) differ
// from `key` (what this rank is doing).
inline void check_same_collective(const std::vector<std::string>& keys, const std::string& key,
                                  const std::vector<int>& members, std::string_view op) {
  for (const std::string& k : keys) {
    if (k == key) continue;
    std::string all;
    for (size_t j = 0; j < keys.size(); ++j)
      all += fmt::format("\n  rank {}: {}", members[j], keys[j]);
    invalid_usage(
        "{}: ranks {} are not in the same collective (different order or different calls):{}", op,
        fmt::join(members, ", "), all);
  }
}

// Note [hosts] (bootstrap.hpp): hosts numbered 0, 1, ... in the order of their lowest rank, from
// a key per rank (host name, or the SYMMFLOW_HOST_ID a test set).
inline std::vector<int> number_hosts(const std::vector<std::string>& key_of_rank) {
  std::vector<int> out(key_of_rank.size(), 0);
  std::vector<std::string> seen;
  for (size_t r = 0; r < key_of_rank.size(); ++r) {
    size_t i = 0;
    while (i < seen.size() && seen[i] != key_of_rank[r]) ++i;
    if (i == seen.size()) seen.push_back(key_of_rank[r]);
    out[r] = int(i);
  }
  return out;
}

// SYMMFLOW_HOST_ID of this process (Note [hosts]): unset gives nullopt; anything but an integer
// in [0, 65535] raises InvalidUsage naming the variable.
std::optional<int> simulated_host_id();

// InvalidUsage for shared memory asked of ranks on several hosts, naming each rank's host.
[[noreturn]] void refuse_spanning_allocation(const Bootstrap& b, const std::vector<int>& members,
                                             std::string_view op);

}  // namespace symmflow
