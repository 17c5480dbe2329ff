// futex_wait / futex_wake_all over the Linux futex system call; see futex.hpp.
#include "futex.hpp"

#include <algorithm>
#include <bit>
#include <thread>

#if defined(__linux__)
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#endif

namespace symmflow {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "futex words must be plain 32-bit integers");

#if defined(__linux__)

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::microseconds timeout) {
  timespec ts{};
  ts.tv_sec = time_t(timeout.count() / 1000000);
  ts.tv_nsec = long(timeout.count() % 1000000) * 1000;
  // EAGAIN (the word already changed), EINTR and ETIMEDOUT all mean: look again.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

std::vector<uint64_t> cpu_mask() {
  std::vector<uint64_t> mask(16, 0);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    mask[0] = 1;
    return mask;
  }
  for (int cpu = 0; cpu < std::min(CPU_SETSIZE, 1024); ++cpu) {
    if (CPU_ISSET(cpu, &set)) mask[size_t(cpu / 64)] |= uint64_t(1) << (cpu % 64);
  }
  return mask;
}

bool pin_thread(int index) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
  int n = CPU_COUNT(&allowed);
  if (n <= 0) return false;
  int want = index % n;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed) || want-- > 0) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return sched_setaffinity(0, sizeof(one), &one) == 0;
  }
  return false;
}

#else

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::microseconds timeout) {
  if (word->load(std::memory_order_relaxed) == expected)
    std::this_thread::sleep_for(std::min(timeout, std::chrono::microseconds(50)));
}

void futex_wake_all(std::atomic<uint32_t>*) {}

std::vector<uint64_t> cpu_mask() {
  unsigned hw = std::max(1u, std::min(1024u, std::thread::hardware_concurrency()));
  std::vector<uint64_t> mask(16, 0);
  for (unsigned cpu = 0; cpu < hw; ++cpu) mask[cpu / 64] |= uint64_t(1) << (cpu % 64);
  return mask;
}

bool pin_thread(int) {
  return false;
}

#endif

int cpu_count(const std::vector<uint64_t>& mask) {
  int n = 0;
  for (uint64_t w : mask) n += std::popcount(w);
  return std::max(n, 1);
}

int usable_cpus() {
  static const int n = cpu_count(cpu_mask());
  return n;
}

}  // namespace symmflow
