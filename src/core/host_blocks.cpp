// Note [host block cache]: a plan's intermediates live in its pools, allocated once, but a
// kernel that allocates its result (a reshape that must copy, a clone, a result handed to the
// caller) gets fresh host memory per call. glibc serves blocks of more than its mmap threshold
// (128 KiB at first, up to 32 MiB) with mmap and unmaps them on free, so each such call faults
// its pages in again, zeroed by the kernel: 4% of a CPU training step's backward under perf
// (issue 40). Blocks of at least kMinBytes are therefore kept on free, keyed by their exact size
// (shapes repeat call after call), and handed out again; at most kMaxCachedBytes stay cached,
// the oldest freed first beyond that. Smaller blocks go to malloc directly (its own bins serve
// them without faults). Threads of every rank share the cache under one mutex: it is taken once
// per allocation of a megabyte or more, next to that allocation's work. Sanitized builds cache
// nothing, so a use after free stays visible.
#include "core/host_blocks.hpp"

#include <cstdint>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <utility>

namespace symmflow::detail {
namespace {

#if defined(SYMMFLOW_ASAN) || defined(SYMMFLOW_TSAN)
constexpr size_t kMinBytes = SIZE_MAX;  // sanitized builds: every block freed, use-after-free seen
#else
constexpr size_t kMinBytes = size_t(1) << 20;
#endif
constexpr size_t kMaxCachedBytes = size_t(1) << 30;

struct Cache {
  std::mutex mu;
  std::deque<std::pair<size_t, void*>> blocks;  // oldest first
  size_t bytes = 0;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: Storage may be freed during exit
  return *c;
}

}  // namespace

void* host_block_take(size_t bytes) {
  if (bytes >= kMinBytes) {
    Cache& c = cache();
    std::lock_guard lock(c.mu);
    for (auto it = c.blocks.rbegin(); it != c.blocks.rend(); ++it) {  // newest first: warm
      if (it->first == bytes) {
        void* p = it->second;
        c.blocks.erase(std::next(it).base());
        c.bytes -= bytes;
        return p;
      }
    }
  }
  return std::aligned_alloc(64, bytes);
}

void host_block_give(void* p, size_t bytes) {
  if (!p) return;
  if (bytes < kMinBytes || bytes > kMaxCachedBytes) {
    std::free(p);
    return;
  }
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  c.blocks.emplace_back(bytes, p);
  c.bytes += bytes;
  while (c.bytes > kMaxCachedBytes) {
    std::free(c.blocks.front().second);
    c.bytes -= c.blocks.front().first;
    c.blocks.pop_front();
  }
}

}  // namespace symmflow::detail
