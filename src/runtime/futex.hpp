// Parking a thread on a 32-bit word until another thread or process changes it (Linux futex; a
// short sleep elsewhere), and the CPUs a rank may run on. The word may live in process memory or in
// memory shared between processes (an MPI shared-memory window), so the shared (not PRIVATE) futex
// operations are used. Private header of the runtime.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

namespace symmflow {

// Sleeps while *word == expected, at most `timeout`; may return early or spuriously. The caller
// re-reads the word and decides.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::microseconds timeout);
// Wakes every thread parked on `word`.
void futex_wake_all(std::atomic<uint32_t>* word);

// The CPUs the calling thread may run on (sched_getaffinity) as a bit mask of up to 1024 CPUs
// (16 words), and how many they are (at least 1).
std::vector<uint64_t> cpu_mask();
int cpu_count(const std::vector<uint64_t>& mask);
// cpu_count(cpu_mask()) of the first call in this process (run_threads makes it before it pins
// any rank thread, so pinned threads still see the process's CPUs).
int usable_cpus();
// Restricts the calling thread to the index-th (mod usable_cpus()) CPU this process may run on;
// false where that is not possible (non-Linux, or the system refused).
bool pin_thread(int index);

}  // namespace symmflow
