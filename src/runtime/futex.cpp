// futex_wait / futex_wake_all over the Linux futex system call; see futex.hpp.
#include "futex.hpp"

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

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? int(hw) : 1;
}

#else

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::microseconds timeout) {
  if (word->load(std::memory_order_relaxed) == expected)
    std::this_thread::sleep_for(std::min(timeout, std::chrono::microseconds(50)));
}

void futex_wake_all(std::atomic<uint32_t>*) {}

int usable_cpus() {
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? int(hw) : 1;
}

#endif

}  // namespace symmflow
