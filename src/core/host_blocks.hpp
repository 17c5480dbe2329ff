// Host memory blocks for Storage::allocate_host: large blocks are kept for reuse (Note [host
// block cache]); small ones go straight to the C allocator.
#pragma once

#include <cstddef>

namespace symmflow::detail {

// 64-byte aligned memory of `bytes` (a multiple of 64), or nullptr when the system has none.
void* host_block_take(size_t bytes);
// Gives back a block from host_block_take of the same `bytes`.
void host_block_give(void* p, size_t bytes);

}  // namespace symmflow::detail
