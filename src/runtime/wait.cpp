// Waiter: spin, then yield, then park on the awaited word (futex) or, without one, sleep; check
// deadline and world failure every 256 polls (and on every poll once backed off). Errors name op,
// group, this rank and the peer waited for.
#include "symmflow/runtime/wait.hpp"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "futex.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/runtime/group.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow {

namespace {
// Longest single park: a parked rank notices a failed peer or its deadline within this.
constexpr std::chrono::microseconds kParkSlice{1000};

bool oversubscribed(const Bootstrap* bootstrap) {
  return bootstrap && bootstrap->local_ranks() > bootstrap->local_cpus();
}
}  // namespace

Waiter::Waiter(const Bootstrap* bootstrap, WaitSite site)
    : bootstrap_(bootstrap), site_(site), start_(std::chrono::steady_clock::now()) {
  const Tunables& t = tunables();
  spin_limit_ = oversubscribed(bootstrap) ? t.oversubscribed_spin_count : t.spin_count;
  yield_limit_ = t.yield_count;
}

void Waiter::pause() {
  // A failure or deadline seen on one poll ends the wait only after the caller polled once more:
  // what a peer did before failing (a flag it raised) is visible by then, so it is not lost.
  if (expired_) fail();
  const Tunables& t = tunables();
  ++polls_;
  if (polls_ <= spin_limit_) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    if ((polls_ & 255) != 0) return;
  } else if (polls_ <= spin_limit_ + t.yield_count) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(t.sleep_us));
  }
  check_deadline();
}

void Waiter::park(std::atomic<uint32_t>* word, uint32_t value) {
  if (expired_) fail();
  ++polls_;
  futex_wait(word, value, kParkSlice);
  check_deadline();
}

void Waiter::check_deadline() {
  if (bootstrap_ && bootstrap_->failure()) expired_ = true;
  if (peer_state_) {
    if (uint32_t s = peer_state_->load(std::memory_order_acquire)) peer_left_ = s, expired_ = true;
  } else if (bootstrap_ && site_.peer >= 0 && bootstrap_->finished(site_.peer)) {
    peer_left_ = Group::kLeftFinished;
    expired_ = true;
  }
  double limit = bootstrap_ ? bootstrap_->timeout_s() : tunables().timeout_s;
  if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() > limit)
    expired_ = true;
}

// Note [the cause before the departure]: a peer that left while this rank waited may have left
// because the world failed: it raised that failure, caught it and finished cleanly. A waiter that
// saw it leave before its rate-limited failure check (store_check_ms) saw the poison would blame
// the departure and hide the cause. So before a departure is reported, the world's failure is
// read again with no rate limit, and it wins.
void Waiter::fail() {
  std::string where = site_.group.empty() ? "" : fmt::format(" in group '{}'", site_.group);
  if (bootstrap_) {
    auto f = peer_left_ != 0 ? bootstrap_->failure_now() : bootstrap_->failure();
    if (f && f->rank != site_.rank) {
      throw_error(ErrorCode::PeerFailure, "{}: rank {} failed ({}) while rank {} waited{}{}",
                  site_.op, f->rank, f->what, site_.rank,
                  site_.peer >= 0 ? fmt::format(" for rank {}", site_.peer) : "", where);
    } else if (f) {
      // This rank's own earlier failure poisoned the world: report it, not a timeout.
      throw_error(ErrorCode::PeerFailure,
                  "{}: rank {} failed earlier ({}), so the world is poisoned and it waits for no "
                  "peer{}",
                  site_.op, site_.rank, f->what, where);
    }
  }
  if (peer_left_ != 0) {
    throw_error(ErrorCode::PeerFailure, "{}: rank {} has {} while rank {} waited for it{}",
                site_.op, site_.peer,
                peer_left_ == Group::kLeftDestroyed ? std::string("destroyed the group")
                : peer_left_ == Group::kLeftFailed
                    ? std::string("poisoned the group (a collective of it failed there)")
                    : std::string("finished (it left the world cleanly)"),
                site_.rank, where);
  }
  double limit = bootstrap_ ? bootstrap_->timeout_s() : tunables().timeout_s;
  throw_error(ErrorCode::Timeout, "{}: timed out after {} s{} on rank {} waiting for {}", site_.op,
              limit, where, site_.rank,
              site_.peer >= 0 ? fmt::format("rank {}", site_.peer) : std::string("peers"));
}

}  // namespace symmflow
