// Parking a thread on a 32-bit word until another thread or process changes it (Linux futex; a
// short sleep elsewhere). The word may live in process memory or in memory shared between
// processes (an MPI shared-memory window), so the shared (not PRIVATE) futex operations are used.
// Private header of the runtime.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace symmflow {

// Sleeps while *word == expected, at most `timeout`; may return early or spuriously. The caller
// re-reads the word and decides.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::microseconds timeout);
// Wakes every thread parked on `word`.
void futex_wake_all(std::atomic<uint32_t>* word);

// Logical CPUs this process may run on (sched_getaffinity), at least 1.
int usable_cpus();

}  // namespace symmflow
