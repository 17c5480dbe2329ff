// Groups: membership, signal pads and the barrier / put_signal / wait_signal primitives
// (Note [signal protocol] in group.hpp). Pads are allocated collectively when the group is made.
#include "symmflow/runtime/group.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "futex.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/runtime/tunables.hpp"
#include "symmflow/runtime/wait.hpp"

namespace symmflow {

namespace {
constexpr int kKinds = 2;
constexpr uint32_t kSignalBit = 1;
constexpr uint32_t kParkedBit = 2;
constexpr int kSignatureShift = 2;
// Note [poisoned groups]: a member's first error, after its state word:
// "<code>\n<unix ms>\n<global rank>\n<text>".
constexpr size_t kFailureTextOffset = 64;
constexpr size_t kFailureTextBytes = 960;

std::string utc_time(int64_t unix_ms) {
  const std::time_t secs = std::time_t(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return fmt::format("{}.{:03d} UTC", buf, int(unix_ms % 1000));
}
}  // namespace

Group::Group(Bootstrap* bootstrap, std::string name, std::vector<int> ranks)
    : bootstrap_(bootstrap), name_(std::move(name)), ranks_(std::move(ranks)) {
  auto it = std::find(ranks_.begin(), ranks_.end(), bootstrap_->rank());
  SF_CHECK(it != ranks_.end(), "group '{}': rank {} is not a member ({})", name_,
           bootstrap_->rank(), fmt::join(ranks_, ", "));
  rank_ = int(it - ranks_.begin());
  channels_ = int(tunables().signal_channels);
  std::vector<int> sorted = ranks_;
  std::sort(sorted.begin(), sorted.end());
  // allocate_shared indexes members in sorted order; keep a group-order view in flag().
  sorted_ = sorted;
  name_hash_ = std::hash<std::string>{}(name_);
  for (int r : ranks_) {
    if (bootstrap_->host_of(r) == bootstrap_->host_of(ranks_[0])) continue;
    make_spanning();  // Note [spanning groups]: no pads or staging of its own
    return;
  }
  size_t flag_bytes = size_t(kKinds) * size_t(channels_) * ranks_.size() * sizeof(uint32_t);
  // The state word on a cache line of its own (Note [peers that left] in group.hpp).
  state_offset_ = (flag_bytes + 63) / 64 * 64;
  pads_ = bootstrap_->allocate_shared(sorted, "pads:" + name_,
                                      state_offset_ + kFailureTextOffset + kFailureTextBytes,
                                      "new_group");
  staging_half_ = size_t(tunables().one_shot_max_bytes + 63) / 64 * 64;
  try {
    staging_ = bootstrap_->allocate_shared(sorted, "staging:" + name_,
                                           std::max<size_t>(2 * staging_half_, 64), "new_group");
  } catch (const Error& e) {
    // Its size is a tunable's: say which, or a user hunts for the allocation (issue 39 item 9).
    throw_error(e.code(),
                "group '{}': its one-shot staging ({} bytes per rank: twice "
                "SYMMFLOW_ONE_SHOT_MAX_BYTES = {}) could not be allocated; lower "
                "SYMMFLOW_ONE_SHOT_MAX_BYTES (the all-reduces above it take two-shot): {}",
                name_, 2 * staging_half_, tunables().one_shot_max_bytes, e.what());
  }
  // Note [staging agreed]: whether a one-shot stages (Note [one-shot staging] in
  // kernels/cpu/collectives/all_reduce.cpp) must be decided alike by every member, or one reads a
  // staging half the other never wrote. A rank's view of its host (ranks, CPUs) can differ from
  // its peers' where a transport meets peers lazily (the store: Note [groups of members only] in
  // runtime.cpp), so the members agree once: oversubscribed when any of them is.
  const bool mine = bootstrap_->local_ranks() > bootstrap_->local_cpus();
  for (const std::string& v :
       bootstrap_->allgather(sorted_, "oversubscribed:" + name_, mine ? "1" : "0", "new_group"))
    oversubscribed_ = oversubscribed_ || v == "1";
}

Group::~Group() = default;

void* Group::staging(int group_rank, int half) const {
  SF_ASSERT(!host_);  // Note [spanning groups]: staging is the host group's
  return static_cast<char*>(staging_->peer(member_index(group_rank))) +
         size_t(half) * staging_half_;
}

int Group::member_index(int group_rank) const {
  int global = ranks_[size_t(group_rank)];
  return int(std::lower_bound(sorted_.begin(), sorted_.end(), global) - sorted_.begin());
}

std::atomic<uint32_t>* Group::flag(int owner, SignalKind kind, int channel, int from) const {
  auto* base = static_cast<std::atomic<uint32_t>*>(pads_->peer(member_index(owner)));
  size_t index =
      (size_t(kind) * size_t(channels_) + size_t(channel)) * ranks_.size() + size_t(from);
  return base + index;
}

std::atomic<uint32_t>* Group::state(int owner) const {
  return reinterpret_cast<std::atomic<uint32_t>*>(
      static_cast<char*>(pads_->peer(member_index(owner))) + state_offset_);
}

void Group::mark_left(uint32_t why) {
  if (host_) return host_->mark_left(why);  // Note [spanning groups]
  uint32_t zero = 0;  // the first reason stays
  state(rank_)->compare_exchange_strong(zero, why, std::memory_order_release);
}

void Group::check_channel(int channel, std::string_view op) const {
  SF_CHECK(channel >= 0 && channel < channels_,
           "{}: channel {} out of range for group '{}' (valid: 0..{}; set SYMMFLOW_SIGNAL_CHANNELS "
           "for more)",
           op, channel, name_, channels_ - 1);
}

char* Group::failure_text(int owner) const {
  return static_cast<char*>(pads_->peer(member_index(owner))) + state_offset_ + kFailureTextOffset;
}

void Group::check_alive(std::string_view op) const {
  SF_CHECK(!shut_down_.load(), "{}: symmflow has shut down (rank {} left its world at exit or by "
           "shutdown), so no call of group '{}' runs", op, bootstrap_->rank(), name_);
  SF_CHECK(!destroyed(), "{}: group '{}' was destroyed; create it again with new_group", op, name_);
  // The world poisoned (a rank failed or aborted) first: said as a wait would say it.
  if (std::optional<RankFailure> w = bootstrap_->failure()) {
    if (w->rank == bootstrap_->rank()) {
      throw_error(ErrorCode::PeerFailure,
                  "{}: rank {} failed earlier ({}), so the world is poisoned and it waits for no "
                  "peer in group '{}'",
                  op, w->rank, w->what, name_);
    }
    throw_error(ErrorCode::PeerFailure,
                "{}: rank {} failed ({}) before rank {} called; the world is poisoned, so no "
                "call of group '{}' runs",
                op, w->rank, w->what, bootstrap_->rank(), name_);
  }
  // Note [poisoned groups]: then this member's own first error, else one a member published.
  if (std::optional<FirstError> f = first_error()) raise_poisoned(op, *f);
}

// The first error recorded here, else the first one a member published (then recorded and
// published here too, so a member that waits only for this one learns it as well).
std::optional<Group::FirstError> Group::first_error() const {
  {
    std::lock_guard lock(poison_mutex_);
    if (first_error_) return first_error_;
  }
  if (host_) {  // Note [spanning groups]: what this host's members published
    std::optional<FirstError> f = host_->first_error();
    if (f) record(*f);
    return f;
  }
  for (int r = 0; r < size(); ++r) {
    if (r == rank_ || state(r)->load(std::memory_order_acquire) != kLeftFailed) continue;
    const char* text = failure_text(r);
    const std::string all(text, strnlen(text, kFailureTextBytes - 1));
    // "<code>\n<unix ms>\n<global rank>\n<text>"
    size_t at[3], from = 0;
    bool ok = true;
    for (size_t& a : at) {
      a = all.find('\n', from);
      ok = ok && a != std::string::npos;
      from = ok ? a + 1 : all.size();
    }
    FirstError f{ErrorCode::PeerFailure, global_rank(r), 0, all};
    if (ok) {
      const int code = std::atoi(all.substr(0, at[0]).c_str());
      if (code >= 0 && code <= int(ErrorCode::Internal)) f.code = ErrorCode(code);
      f.unix_ms = std::atoll(all.substr(at[0] + 1, at[1] - at[0] - 1).c_str());
      f.rank = std::atoi(all.substr(at[1] + 1, at[2] - at[1] - 1).c_str());
      f.what = all.substr(at[2] + 1);
    }
    record(f);
    std::lock_guard lock(poison_mutex_);
    return first_error_;
  }
  return std::nullopt;
}

void Group::poison(const Error& e) const {
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  record(FirstError{e.code(), bootstrap_->rank(), now, e.what()});
}

void Group::record(const FirstError& f) const {
  if (host_) {  // Note [spanning groups]: kept here, published to this host's members
    {
      std::lock_guard lock(poison_mutex_);
      if (first_error_) return;
      first_error_ = f;
    }
    host_->record(f);
    return;
  }
  std::lock_guard lock(poison_mutex_);
  if (first_error_) return;
  first_error_ = f;
  // Published once: the text first, then the state word with release order (readers acquire it).
  if (state(rank_)->load(std::memory_order_relaxed) != 0) return;
  const std::string text = fmt::format("{}\n{}\n{}\n{}", int(f.code), f.unix_ms, f.rank, f.what);
  const size_t n = std::min(text.size(), kFailureTextBytes - 1);
  std::memcpy(failure_text(rank_), text.data(), n);
  failure_text(rank_)[n] = '\0';
  uint32_t zero = 0;
  state(rank_)->compare_exchange_strong(zero, kLeftFailed, std::memory_order_release);
}

void Group::raise_poisoned(std::string_view op, const FirstError& f) const {
  throw Error(f.code,
              fmt::format("{}: group '{}' is poisoned: a collective failed on rank {}{} ({}); no "
                          "later call of the group runs (Note [poisoned groups]): destroy it and "
                          "create a new group to go on",
                          op, name_, f.rank, f.unix_ms ? " at " + utc_time(f.unix_ms) : "",
                          f.what));
}

// Note [signal protocol] in group.hpp: bit 1 is the signal, bit 2 says the other side parked,
// bits 2.. the raiser's call signature (Note [collective agreement] in agreement.cpp).
uint32_t Group::transition(std::atomic<uint32_t>* f, uint32_t expect, uint32_t to,
                           std::memory_order order, int peer, std::string_view op) {
  uint32_t v = expect;
  if (f->compare_exchange_strong(v, to, order, std::memory_order_relaxed)) return expect;
  try {
    return wait_transition(f, expect, to, order, peer, op);
  } catch (const Error& e) {
    // Note [poisoned groups]: a member's published error is the group's first, else this one.
    const std::optional<FirstError> first = first_error();
    if (!first) {
      poison(e);
      throw;
    }
    // The awaited peer failed and said why: name its words, not only that it left.
    if (first->rank == global_rank(peer) && state(peer)->load(std::memory_order_acquire) == kLeftFailed &&
        e.code() == ErrorCode::PeerFailure && !bootstrap_->failure()) {
      throw_error(ErrorCode::PeerFailure, "{}: rank {} failed ({}) while rank {} waited for it in "
                  "group '{}'", op, first->rank, first->what, bootstrap_->rank(), name_);
    }
    throw;
  }
}

uint32_t Group::wait_transition(std::atomic<uint32_t>* f, uint32_t expect, uint32_t to,
                                std::memory_order order, int peer, std::string_view op) {
  uint32_t v = f->load(std::memory_order_relaxed);
  const uint32_t from = expect & kSignalBit;
  Waiter w(bootstrap_, {op, name_, bootstrap_->rank(), global_rank(peer)});
  w.watch_peer_state(state(peer));
  for (;;) {
    if ((v & kSignalBit) == from) {
      // Ready: publish, and wake the other side if it parked.
      if (f->compare_exchange_weak(v, to, order, std::memory_order_relaxed)) {
        if (v & kParkedBit) futex_wake_all(f);
        return v & ~kParkedBit;
      }
      continue;
    }
    if (!w.should_park()) {
      w.pause();
    } else if (v & kParkedBit) {
      w.park(f, v);
    } else if (f->compare_exchange_weak(v, v | kParkedBit, std::memory_order_relaxed)) {
      w.park(f, v | kParkedBit);
    } else {
      continue;  // v was reloaded by the failed exchange
    }
    v = f->load(std::memory_order_relaxed);
  }
}

void Group::raise(SignalKind kind, int peer, int channel, std::string_view op,
                  uint32_t signature) {
  transition(flag(peer, kind, channel, rank_), 0, kSignalBit | (signature << kSignatureShift),
             std::memory_order_release, peer, op);
}

uint32_t Group::consume(SignalKind kind, int peer, int channel, std::string_view op,
                        uint32_t expected_signature) {
  return transition(flag(rank_, kind, channel, peer),
                    kSignalBit | (expected_signature << kSignatureShift), 0,
                    std::memory_order_acquire, peer, op) >>
         kSignatureShift;
}

void Group::barrier(int channel, std::string_view op) {
  if (host_) {  // Note [spanning groups]
    check_channel(channel, op);
    agreed_exchange(sorted_, name_, op, nullptr, {});
    return;
  }
  signed_barrier(channel, op, 0, nullptr);
}

void Group::barrier(int channel, const CollectiveCall& call) {
  if (host_) {
    check_channel(channel, call.op);
    exchange(call, {});
    return;
  }
  if (!tunables().collective_agreement) {
    signed_barrier(channel, call.op, 0, &call);  // signature 0: agreement is off here
    return;
  }
  signed_barrier(channel, call.op, signature(call), &call);
}

// Every barrier compares the signatures its peers raised with its own (0 for a plain barrier), so
// a plain barrier meeting a collective's fails on both sides (Note [collective agreement]).
void Group::signed_barrier(int channel, std::string_view op, uint32_t signature,
                           const CollectiveCall* call) {
  check_alive(op);
  check_channel(channel, op);
  int n = size();
  for (int i = 1; i < n; ++i) raise(SignalKind::barrier, (rank_ + i) % n, channel, op, signature);
  bool agree = true;
  for (int i = 1; i < n; ++i)
    agree &= consume(SignalKind::barrier, (rank_ + n - i) % n, channel, op, signature) == signature;
  if (!agree) {
    try {
      disagree(op, call, signature);
    } catch (const Error& e) {
      poison(e);  // Note [poisoned groups]
      throw;
    }
  }
}

void Group::put_signal(int peer, int channel, std::string_view op) {
  check_alive(op);
  check_channel(channel, op);
  SF_CHECK(peer >= 0 && peer < size(), "{}: peer {} out of range for group '{}' of size {}", op,
           peer, name_, size());
  if (host_) return host_->put_signal(host_peer(peer, op), channel, op);
  raise(SignalKind::signal, peer, channel, op);
}

void Group::wait_signal(int peer, int channel, std::string_view op) {
  check_alive(op);
  check_channel(channel, op);
  SF_CHECK(peer >= 0 && peer < size(), "{}: peer {} out of range for group '{}' of size {}", op,
           peer, name_, size());
  if (host_) return host_->wait_signal(host_peer(peer, op), channel, op);
  consume(SignalKind::signal, peer, channel, op);
}

std::vector<std::string> Group::allgather(std::string data, std::string_view op) {
  check_alive(op);
  std::vector<int> sorted = sorted_;
  std::vector<std::string> by_sorted = bootstrap_->allgather(
      sorted, fmt::format("group:{}:{}", name_, exchange_seq_++), std::move(data), op);
  std::vector<std::string> out(ranks_.size());
  for (int r = 0; r < size(); ++r) out[size_t(r)] = std::move(by_sorted[size_t(member_index(r))]);
  return out;
}

}  // namespace symmflow
