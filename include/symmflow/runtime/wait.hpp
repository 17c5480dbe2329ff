// Bounded waiting. Every wait in the runtime goes through Waiter: it spins tunables().spin_count
// polls, then yields, then sleeps tunables().sleep_us between polls, so that 8 ranks on 2 cores
// still make progress; every few polls it checks the deadline and the world's failure flag.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "symmflow/runtime/bootstrap.hpp"

namespace symmflow {

// What a wait is for, for the error message: "<op>: timed out after 5 s in group 'tp' on rank 1
// waiting for rank 3" or "<op>: rank 3 failed (...) while rank 1 waited for it in group 'tp'".
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
  void set_peer(int peer) { site_.peer = peer; }

 private:
  [[noreturn]] void fail();
  const Bootstrap* bootstrap_;
  WaitSite site_;
  std::chrono::steady_clock::time_point start_;
  int64_t polls_ = 0;
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
