// Bounded waiting. Every wait in the runtime goes through Waiter: it spins tunables().spin_count
// polls (tunables().oversubscribed_spin_count, default 0, when this host runs more ranks than it
// has usable CPUs: spinning then only steals the core from the rank being waited for), then yields
// the core tunables().yield_count times, then backs off: it parks on the word it waits for (park(),
// futex, woken by the writer) or, for waits without such a word, sleeps tunables().sleep_us between
// polls (pause()). So 8 ranks on 2 cores make progress, and a long wait costs no CPU. Every few
// polls, and after every park, it checks the deadline and the world's failure flag.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "symmflow/runtime/bootstrap.hpp"

namespace symmflow {

// What a wait is for, for the error message: "<op>: timed out after 5 s in group 'tp' on rank 1
// waiting for rank 3", "<op>: rank 3 failed (...) while rank 1 waited for rank 3 in group 'tp'",
// "<op>: rank 3 has finished (...) while rank 1 waited for it in group 'tp'" (a peer that left,
// Note [peers that left] in group.hpp), or, when this rank itself failed earlier, "<op>: rank 1
// failed earlier (...) and cannot wait for peers".
struct WaitSite {
  std::string_view op;
  std::string_view group;
  int rank = -1;  // this rank (global)
  int peer = -1;  // the rank waited for (global), -1 when unknown
};

class Waiter {
 public:
  Waiter(const Bootstrap* bootstrap, WaitSite site);
  // Call once per failed poll; throws Timeout or PeerFailure when the wait must end (one poll
  // after the failure or deadline was first seen).
  void pause();
  // True once spinning and yielding are spent: the caller should park() instead of pause().
  bool should_park() const { return polls_ >= spin_limit_ + yield_limit_; }
  // Sleeps while *word == value (futex), at most a slice of the remaining time, then checks the
  // deadline and the failure flag like pause(). The writer that changes *word must wake it
  // (futex_wake_all) if it sees that someone parked.
  void park(std::atomic<uint32_t>* word, uint32_t value);
  void set_peer(int peer) { site_.peer = peer; }
  // The state word of the peer waited for in a group (Note [peers that left] in group.hpp): once
  // it is not 0 the wait ends (after one more poll) with PeerFailure saying the peer left.
  void watch_peer_state(const std::atomic<uint32_t>* state) { peer_state_ = state; }

 private:
  [[noreturn]] void fail();
  void check_deadline();
  const Bootstrap* bootstrap_;
  WaitSite site_;
  const std::atomic<uint32_t>* peer_state_ = nullptr;
  uint32_t peer_left_ = 0;  // the peer's state once seen not 0
  std::chrono::steady_clock::time_point start_;
  int64_t polls_ = 0;
  int64_t spin_limit_ = 0;
  int64_t yield_limit_ = 0;
  bool expired_ = false;
};

// Spins until pred() holds; `site` names the wait. pred must be cheap and side-effect free
// except on success.
template <typename Pred>
void wait_until(const Bootstrap* bootstrap, const WaitSite& site, Pred&& pred) {
  if (pred()) return;
  Waiter w(bootstrap, site);
  while (!pred()) w.pause();
}

}  // namespace symmflow
