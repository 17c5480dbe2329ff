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
// Waking costs a system call only when someone parked.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "symmflow/runtime/bootstrap.hpp"

namespace symmflow {

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
  void put_signal(int peer, int channel, std::string_view op);   // peer: group rank
  void wait_signal(int peer, int channel, std::string_view op);  // peer: group rank
  // Raise / consume one flag (the building blocks of the above).
  void raise(SignalKind kind, int peer, int channel, std::string_view op);
  void consume(SignalKind kind, int peer, int channel, std::string_view op);
  // Waits until the flag's signal bit equals `from`, then stores `to` (clearing the parked bit)
  // with `order` and wakes a parked peer.
  void transition(std::atomic<uint32_t>* f, uint32_t from, uint32_t to, std::memory_order order,
                  int peer, std::string_view op);

  // Double-buffered staging of the cpu one-shot collectives (Note [one-shot staging] in
  // kernels/cpu/collectives/all_reduce.cpp): two halves of staging_half_bytes() on every member,
  // allocated with the group (tunables().one_shot_max_bytes each). next_staging_half() alternates
  // 0, 1; every rank calls it once per one-shot, so the ranks agree.
  void* staging(int group_rank, int half) const;
  size_t staging_half_bytes() const { return staging_half_; }
  int next_staging_half() { return int(staging_calls_++ & 1); }

  // All-gather of small strings among the members (for validation).
  std::vector<std::string> allgather(std::string data, std::string_view op);

  // After destroy, every operation on this group raises InvalidUsage "group 'x' was destroyed".
  void mark_destroyed() { destroyed_.store(true); }
  bool destroyed() const { return destroyed_.load(); }
  void check_alive(std::string_view op) const;

 private:
  std::atomic<uint32_t>* flag(int owner, SignalKind kind, int channel, int from) const;
  void check_channel(int channel, std::string_view op) const;
  Bootstrap* bootstrap_;
  std::string name_;
  std::vector<int> ranks_;
  std::vector<int> sorted_;  // ranks_ sorted: the member order of bootstrap exchanges
  int rank_ = -1;
  int channels_ = 0;
  uint64_t allocation_seq_ = 0;
  uint64_t exchange_seq_ = 0;
  std::shared_ptr<SharedRegion> pads_;
  std::shared_ptr<SharedRegion> staging_;
  size_t staging_half_ = 0;
  uint64_t staging_calls_ = 0;
  std::atomic<bool> destroyed_{false};
};

}  // namespace symmflow
