// The validated rendezvous of every symmetric allocation (host heaps in heap.cpp, GPU heaps in
// cuda/heap.cpp). Private header of the runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "symmflow/runtime/group.hpp"

namespace symmflow {

// Collective over `group`: every member presents (its next allocation number, bytes); when any
// member differs, every member raises the same InvalidUsage listing each rank's request. Returns
// the allocation number.
uint64_t validate_symmetric_request(Group& group, size_t bytes, std::string_view op);

}  // namespace symmflow
