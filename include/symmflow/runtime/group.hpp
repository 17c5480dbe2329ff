// Groups and their signal pads.
//
// A Group is a named, ordered set of global ranks ("world", "tp"); its members create it together
// (Runtime::new_group). Each member owns a signal pad: 32-bit flags that peers store to and the
// owner waits on, laid out as pad[kind][channel][peer] with kinds `barrier` (used by barrier) and
// `signal` (used by put_signal / wait_signal), tunables().signal_channels channels each.
//
// Note [signal protocol]: a signal from rank A to rank B on channel c is the flag
// B.pad[kind][c][A]. A raises it by compare-exchange 0 -> 1 (waiting while it is still 1, i.e.
// while B has not consumed the previous signal), with release order; B consumes it by
// compare-exchange 1 -> 0 with acquire order. So every store A made before put_signal is visible to
// B after wait_signal, flags return to zero after each use (replay-safe), and signals are never
// lost or merged. barrier(c) = raise to every peer, then consume from every peer.
// A side that has to wait spins, yields and then parks on the flag (futex; wait.hpp): it sets the
// flag's parked bit (2) by compare-exchange, and the other side, whose compare-exchange then sees
// the bit, wakes it after publishing (value 1 -> 0 clears the bit too; 0|2 -> 1 likewise). Only
// one rank raises and one consumes a given flag, so at most one side is parked on it at a time.
// Waking costs a system call only when someone parked. Bits 2..31 of a barrier flag carry the
// raiser's call signature (Note [collective agreement] in src/runtime/agreement.cpp); 0 for a
// plain barrier and for every put_signal.
//
// Note [peers that left]: each member's pad ends with a state word that only its owner writes:
// 0 while it runs, kLeftFinished once its Runtime was torn down without an exception in flight,
// kLeftDestroyed once it destroyed the group, kLeftFailed once a collective of the group failed
// on it (Note [poisoned groups]). A wait for a peer whose state is not 0 ends at
// once with PeerFailure ("rank 3 has finished ...") instead of waiting out the timeout; what that
// peer did before it left (a flag it raised) is still seen, since the state is stored with release
// order after everything else the peer did in the group, and read with acquire order before the
// last poll. The pads' memory outlives the peer (every transport frees it with the last mapping).
//
// Note [poisoned groups]: an error inside a collective of a group (a wait that timed out or found
// a peer failed, a disagreement of the ranks' calls) is final for the group on every member: the
// member it happened on records it (the first error stays) and publishes it in its pad, the text
// beside the state word (kLeftFailed), so a peer's next call on the group, or its wait, raises at
// once naming that first error, its rank and time, and records it too. Every later call on the
// group raises before anything moves (check_alive), as does every call once the world is
// poisoned (Bootstrap::failure, e.g. an abort). A collective that fails on one rank leaves the
// state of the others' (staging halves, signal flags) out of step; going on would return wrong
// values with no error (seen: five of five all-reduces after a caught disagreement). Recovery is
// explicit: destroy the group and create a new one (fresh pads and staging, a fresh
// rendezvous); a poisoned world group is left by making a new group of the same ranks.
//
// Note [spanning groups]: a group whose members run on several hosts (Note [hosts] in
// bootstrap.hpp) cannot map its members' memory across the hosts. Its pads, staging and heaps
// are therefore per host: the members on one host make a group of their own (host_group(), named
// "<name>@host<i>", i the host's place among the group's hosts in the order of their first
// member; pads and staging as any group), a heap of the group maps only the blocks of
// this host's members (SymmetricHeap::peer of a member elsewhere is null), and its collectives
// (kernels/cpu/collectives/spanning.cpp) move data between hosts only through the bootstrap's
// exchange (MPI, the store), never through memory. Each exchange carries the call's description,
// so the ranks agree on the call (Note [collective agreement]) across hosts too; an error in one
// poisons the group here and on this host's members (Note [poisoned groups]); members on other
// hosts learn it from their next exchange's wait (bounded by the timeout). put_signal,
// wait_signal and get reach members on this host only.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "symmflow/core/dtype.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/runtime/bootstrap.hpp"

namespace symmflow {

class SymmetricHeap;

// What every rank of one collective call must agree on (Note [collective agreement] in
// src/runtime/agreement.cpp), beside the group the barrier runs on: the op, the reduce op (empty
// when the op has none), the dtype, the element count, and the op's one integer argument that
// must match where it has one (`param_name` "root", "shift"; empty when none). Views: the strings
// must live through the barrier.
struct CollectiveCall {
  CollectiveCall(std::string_view op_name, std::string_view reduce, DType type, int64_t elements,
                 std::string_view argument_name = {}, int64_t argument = 0)
      : op(op_name),
        reduce_op(reduce),
        dtype(type),
        count(elements),
        param_name(argument_name),
        param(argument) {}
  std::string_view op;
  std::string_view reduce_op;
  DType dtype;
  int64_t count;
  std::string_view param_name;
  int64_t param;
};

// Note [program steps in agreement] (src/runtime/agreement.cpp): the compiled program and step a
// collective runs for, on this thread; program 0 for an eager call. Set by the executor around
// each step (ProgramStepScope); part of every collective's signature.
struct ProgramStep {
  uint64_t program = 0;   // the plan's hash (exec::detail::plan_hash); 0: not in a program
  int64_t step = -1;      // index of the plan step
  std::string_view name;  // the program's name, for messages (lives as long as the plan)
};
const ProgramStep& current_program_step();
class ProgramStepScope {
 public:
  explicit ProgramStepScope(const ProgramStep& step);
  ~ProgramStepScope();
  ProgramStepScope(const ProgramStepScope&) = delete;
  ProgramStepScope& operator=(const ProgramStepScope&) = delete;

 private:
  ProgramStep saved_;
};

class Group {
 public:
  enum class SignalKind { barrier = 0, signal = 1 };

  Group(Bootstrap* bootstrap, std::string name, std::vector<int> ranks);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }  // index of this rank in the group
  int size() const { return int(ranks_.size()); }
  const std::vector<int>& ranks() const { return ranks_; }  // global ranks, in group order
  int global_rank(int group_rank) const { return ranks_.at(size_t(group_rank)); }
  Bootstrap& bootstrap() const { return *bootstrap_; }
  // Position of a group rank among the sorted members (the order of bootstrap exchanges and of
  // SharedRegion::peer).
  int member_index(int group_rank) const;
  int channels() const { return channels_; }
  // Next allocation sequence number of this group (validated at rendezvous).
  uint64_t next_allocation_seq() { return allocation_seq_++; }

  // Synchronisation; `op` names the caller in errors. Channels are checked: an out-of-range
  // channel is InvalidUsage naming op, group and the valid range.
  void barrier(int channel, std::string_view op);
  // The barrier of a collective: it also makes the ranks agree on `call` (Note [collective
  // agreement]). When any rank's call differs, every rank raises InvalidUsage naming the op, each
  // field that differs and every rank's value, after the barrier and before any data moves. With
  // tunables().collective_agreement off it is the plain barrier.
  void barrier(int channel, const CollectiveCall& call);
  void put_signal(int peer, int channel, std::string_view op);   // peer: group rank
  void wait_signal(int peer, int channel, std::string_view op);  // peer: group rank
  // Raise / consume one flag (the building blocks of the above). raise stores `signature` (30
  // bits) beside the signal bit; consume returns the signature the raiser stored.
  void raise(SignalKind kind, int peer, int channel, std::string_view op, uint32_t signature = 0);
  uint32_t consume(SignalKind kind, int peer, int channel, std::string_view op,
                   uint32_t expected_signature = 0);
  // Waits until the flag's signal bit equals expect's, then stores `to` (clearing the parked
  // bit) with `order` and wakes a parked peer. Returns the value replaced (without the parked
  // bit). One compare-exchange when the flag holds exactly `expect`.
  uint32_t transition(std::atomic<uint32_t>* f, uint32_t expect, uint32_t to,
                      std::memory_order order, int peer, std::string_view op);
  // transition's wait, once the first compare-exchange failed.
  uint32_t wait_transition(std::atomic<uint32_t>* f, uint32_t expect, uint32_t to,
                           std::memory_order order, int peer, std::string_view op);

  // Values of a member's state word (Note [peers that left]).
  static constexpr uint32_t kLeftFinished = 1;
  static constexpr uint32_t kLeftDestroyed = 2;
  static constexpr uint32_t kLeftFailed = 3;  // Note [poisoned groups]
  // Publishes that this rank left the group (`why`: kLeftFinished or kLeftDestroyed).
  void mark_left(uint32_t why);

  // Double-buffered staging of the cpu one-shot collectives (Note [one-shot staging] in
  // kernels/cpu/collectives/all_reduce.cpp): two halves of staging_half_bytes() on every member,
  // allocated with the group (tunables().one_shot_max_bytes each). next_staging_half() alternates
  // 0, 1; every rank calls it once per one-shot, so the ranks agree.
  void* staging(int group_rank, int half) const;
  size_t staging_half_bytes() const { return staging_half_; }
  int next_staging_half() { return int(staging_calls_++ & 1); }
  // Whether a member's host runs more ranks than CPUs, agreed by the members at creation (Note
  // [staging agreed] in group.cpp): the one-shot stages whenever this is true.
  bool oversubscribed() const { return oversubscribed_; }

  // All-gather of small strings among the members (for validation).
  std::vector<std::string> allgather(std::string data, std::string_view op);

  // Note [spanning groups]. Whether the members run on more than one host.
  bool spans_hosts() const { return host_ != nullptr; }
  int hosts() const { return hosts_; }
  // The members on this rank's host, in group order (this group itself when it spans no hosts).
  Group& host_group() { return host_ ? *host_ : *this; }
  const Group& host_group() const { return host_ ? *host_ : *this; }
  const std::shared_ptr<Group>& host_group_ptr() const { return host_; }
  // Memory of this host's members that a hierarchical collective stages its result in (Note
  // [hierarchical all-reduce] in kernels/cpu/collectives/spanning.cpp), grown by it.
  std::shared_ptr<SymmetricHeap> span_scratch;
  // A member's index in host_group(), or InvalidUsage naming both hosts when it runs on another
  // host (signals and loads reach only one's own host).
  int host_peer(int group_rank, std::string_view op) const;
  // A member's index in host_group(), or -1 when it runs on another host.
  int host_rank_of(int group_rank) const;
  // Whether every host holds the same number of members (a hierarchical collective needs it).
  bool uniform() const { return uniform_; }
  // The members with this rank's index in host_group() on every host, by host: hosts in the order
  // of their first member in group order (uniform only).
  const std::vector<int>& cross_ranks() const { return cross_; }
  // Sorted global ranks whose memory one heap of this group maps together (all members, or this
  // host's), and a member's index among them (-1: another host).
  const std::vector<int>& region_members() const { return host_ ? host_sorted_ : sorted_; }
  int region_index(int group_rank) const;
  // Exchange through the bootstrap (the network engine) among all members (results in group
  // order) or among cross_ranks() (results by host), agreeing on `call` first: every rank raises
  // InvalidUsage naming what differs when any member's call does; any error poisons the group.
  std::vector<std::string> exchange(const CollectiveCall& call, std::string payload);
  std::vector<std::string> exchange_across(const CollectiveCall& call, std::string payload);
  // Meets cross_ranks() in the exchange `call` would make, with `e` instead of data: the
  // partners raise PeerFailure naming this rank and `e` (the group is poisoned everywhere).
  void fail_across(const CollectiveCall& call, const Error& e);
  // A call's fields as text (a plain barrier's without `call`; Note [collective agreement]), and
  // the error for differing ones.
  std::string call_text(std::string_view op, const CollectiveCall* call) const;
  [[noreturn]] void disagree_among(std::string_view op, const std::vector<int>& ranks,
                                   const std::vector<std::string>& texts) const;

  // After destroy, every operation on this group raises InvalidUsage "group 'x' was destroyed".
  void mark_destroyed() { destroyed_.store(true); }
  bool destroyed() const { return destroyed_.load(); }
  // After the runtime shut down (Runtime::shut_down), every operation raises InvalidUsage
  // "symmflow has shut down" (Note [use after shutdown] in runtime.hpp).
  void mark_shut_down() {
    shut_down_.store(true);
    destroyed_.store(true);
  }
  // Raises when the group was destroyed, is poisoned (here or on a member: Note [poisoned
  // groups]) or the world is poisoned; `op` names the caller.
  void check_alive(std::string_view op) const;
  // Records `e`, an error of a collective of this group on this rank, as the group's first error
  // (a later one is dropped) and publishes it to the members (Note [poisoned groups]).
  void poison(const Error& e) const;
  // Whether it is poisoned here or a member published that it is (Note [poisoned groups]).
  bool poisoned() const { return first_error().has_value(); }

 private:
  std::atomic<uint32_t>* flag(int owner, SignalKind kind, int channel, int from) const;
  std::atomic<uint32_t>* state(int owner) const;  // Note [peers that left]
  char* failure_text(int owner) const;            // Note [poisoned groups]
  // The first error published by a member (or recorded here), with its rank and time.
  struct FirstError {
    ErrorCode code;
    int rank;         // global
    int64_t unix_ms;  // when it happened (0: not known)
    std::string what;
  };
  std::optional<FirstError> first_error() const;
  void record(const FirstError& f) const;  // the first one stays; published in this pad
  [[noreturn]] void raise_poisoned(std::string_view op, const FirstError& f) const;
  void check_channel(int channel, std::string_view op) const;
  void make_spanning();  // Note [spanning groups]: host group, cross ranks
  // Exchange among `members` (sorted) of (call text, payload), checked alike on every member.
  std::vector<std::string> agreed_exchange(const std::vector<int>& members,
                                           const std::string& tag, std::string_view op,
                                           const CollectiveCall* call, std::string payload);

  void signed_barrier(int channel, std::string_view op, uint32_t signature,
                      const CollectiveCall* call);
  // Note [collective agreement] (agreement.cpp).
  uint32_t signature(const CollectiveCall& call) const;
  [[noreturn]] void disagree(std::string_view op, const CollectiveCall* call, uint32_t signature);
  Bootstrap* bootstrap_;
  std::string name_;
  std::vector<int> ranks_;
  std::vector<int> sorted_;  // ranks_ sorted: the member order of bootstrap exchanges
  int rank_ = -1;
  int channels_ = 0;
  uint64_t allocation_seq_ = 0;
  uint64_t exchange_seq_ = 0;
  std::shared_ptr<SharedRegion> pads_;
  size_t state_offset_ = 0;  // bytes from a pad's start to its state word
  uint64_t name_hash_ = 0;   // of name_, for call signatures
  std::shared_ptr<SharedRegion> staging_;
  std::shared_ptr<Group> host_;    // Note [spanning groups]: null unless the members span hosts
  int hosts_ = 1;
  bool uniform_ = true;
  std::vector<int> host_rank_;     // group rank -> index in host_ (-1: another host)
  std::vector<int> host_sorted_;   // this host's members, sorted global ranks
  std::vector<int> cross_;         // global ranks, by host
  size_t staging_half_ = 0;
  uint64_t staging_calls_ = 0;
  bool oversubscribed_ = false;
  std::atomic<bool> destroyed_{false};
  std::atomic<bool> shut_down_{false};
  mutable std::mutex poison_mutex_;
  mutable std::optional<FirstError> first_error_;  // under poison_mutex_
};

}  // namespace symmflow
