// The `store` transport's Bootstrap: processes started by anything (a launcher, a test with
// fork/exec) meet through a KeyValueStore (private header; options in store.hpp).
//
// Contract:
// - Joining: every rank adds 1 to <prefix>/join/<rank> (a second process with the same rank, or a
//   store left over from an earlier run with the same prefix, raises InvalidUsage saying so and
//   poisons the world with that text, so the ranks already in it fail too), then publishes
//   <prefix>/hello/<rank>: world size, pid, host (host name + pid namespace) and CPU set, and
//   returns: it reads a peer's hello when it first meets the peer in an exchange or allocation
//   (Note [groups of members only] in runtime.cpp; bounded, a Timeout names the first rank
//   missing); a peer that disagrees on the world size makes that call raise InvalidUsage listing
//   each rank's.
// - exchange: the data of collectives of groups that span hosts, in keys written again every
//   other call (Note [store exchanges] in store_exchange.cpp).
// - Hosts (Note [hosts]): from the hellos' host keys (host name + pid namespace), or the
//   SYMMFLOW_HOST_ID a test set (then each id is a host of its own); numbered in the order this
//   rank met them (only equality means anything across ranks).
// - allgather: per member set a sequence number, like the threads transport; member i sets
//   <prefix>/ag/<hash of the member set>-<n>/<seq>/<rank> to (key, data) and waits for the others'
//   keys. Keys compare as on the other transports (check_same_collective). Keys are never
//   deleted: a world writes a few per new group or allocation, not per step.
// - allocate_shared: members must share a host; host shared memory (Note [store shared memory] in
//   host_memory.hpp), sizes compared first (every member raises the same InvalidUsage listing
//   each rank's bytes), zeroed and reserved (a block that does not fit in /dev/shm makes every
//   member raise System listing each rank's result), every peer's block mapped here, freed when
//   the last mapping goes.
// - poison / failure: poison() claims <prefix>/poison_claim (the first claim wins) and writes
//   <prefix>/poison = "<rank>\n<what>". failure() reads it, and also watches the processes of
//   this host's peers (a pidfd each; Note [dead peers]), so a peer that was SIGKILLed, which cannot
//   poison, is named within tunables().store_check_ms (and its shared-memory names removed); the
//   observer then poisons on its behalf, so ranks on other hosts learn it too. Peers on other
//   hosts that die silently are covered by the timeout. Checks are rate-limited to one per store_check_ms (failure() is called from
//   every wait of the collectives); failure_now() skips the limit.
// - A join that failed after counting itself in (its hello could not be written: "Too many open
//   files") may be retried by the same process (Note [retrying a failed join]).
// - A forked child never speaks for its parent's rank: it neither poisons nor leaves the world
//   (Note [forked children]).
// - Exit: depart() (or the destructor) sets <prefix>/exit/<rank>; a rank that serves the store (TcpStore) first
//   waits, bounded, until every rank has set it or died, so that peers never lose the server
//   while they finish. A wait for a key of a rank that left that way fails at once with
//   PeerFailure "rank N has finished" (Note [waits for a rank that left]).
// - Thread-safe: bootstrap operations are serialized by a mutex; failure() by its own.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "symmflow/runtime/store.hpp"

namespace symmflow {

// FNV-1a of a member set's ranks: the name of its keys in the store.
uint64_t member_hash(const std::vector<int>& members);

class StoreBootstrap : public Bootstrap {
 public:
  explicit StoreBootstrap(const StoreOptions& options);
  ~StoreBootstrap() override;

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  Transport transport() const override { return Transport::store; }
  // Of the ranks met so far (Note [groups of members only]).
  int local_ranks() const override { return local_ranks_.load(); }
  int local_cpus() const override { return local_cpus_.load(); }
  double timeout_s() const override { return timeout_s_; }

  std::vector<std::string> allgather(const std::vector<int>& members, const std::string& key,
                                     std::string data, std::string_view op) override;
  std::shared_ptr<SharedRegion> allocate_shared(const std::vector<int>& members,
                                                const std::string& key, size_t bytes,
                                                std::string_view op) override;
  std::vector<std::string> exchange(const std::vector<int>& members, const std::string& tag,
                                    std::string data,
                                    std::string_view op) override;  // Note [store exchanges]
  int host_of(int rank) const override;             // reads its hello first if need be
  bool met_everyone() const override;
  std::string host_name(int rank) const override;  // the same
  void poison(const std::string& why) override;
  std::optional<RankFailure> failure() const override;
  std::optional<RankFailure> failure_now() const override;  // the rate limit skipped
  void depart() override;

 private:
  struct Peer {
    int pid = 0;
    std::string host;      // host name, for messages
    std::string host_key;  // host name + pid namespace: same key = pidfd works
    int pidfd = -1;        // same-host peers only
    bool exited = false;   // left cleanly (exit key seen)
    bool swept = false;    // its process ended and its shared-memory names were removed
    bool known = false;    // its hello was read (Note [groups of members only])
    int host_id = 0;       // index of host_key in host_keys_ (Note [hosts])
  };
  std::string key(const std::string& suffix) const { return prefix_ + "/" + suffix; }
  void join();
  // Reads the hellos of `ranks` not met yet, waiting for them (bounded).
  void learn(const std::vector<int>& ranks, std::string_view op);
  void add_peer(int r, const std::string& hello);  // caller holds failure_mutex_
  // Waits until every key is set, naming ranks[i] while keys[i] is missing; raises Timeout or
  // PeerFailure as the waits of the other transports do.
  void await(const std::vector<std::string>& keys, const std::vector<int>& ranks,
             std::string_view op);
  // Whether a same-host peer's process is gone (without the exit key). Caller holds failure_mutex_.
  bool peer_died(int r) const;
  // Whether rank r left cleanly (its exit key is set) without setting `key_of_r` (Note [waits for
  // a rank that left] in store_bootstrap.cpp).
  bool finished_without(int r, const std::string& key_of_r);
  void publish_poison(int rank, const std::string& why) const;
  // Waits until the counter `counter` of rank `rank` reaches `value` (Note [store exchanges]).
  void await_count(const std::string& counter, int64_t value, int rank, std::string_view op);
  void wait_for_exits() noexcept;

  // Whether the calling process is the one that joined (Note [forked children]).
  bool in_owner() const;
  std::string attempt_key() const;  // store, prefix and rank (Note [retrying a failed join])

  std::shared_ptr<KeyValueStore> store_;
  int owner_pid_ = 0;
  bool departed_ = false;
  int64_t joined_ = 0;  // this attempt's count of join/<rank> (Note [retrying a failed join])
  std::string prefix_;
  int rank_ = 0;
  int size_ = 0;
  double timeout_s_ = 30;
  std::atomic<int> local_ranks_{1};
  std::atomic<int> local_cpus_{1};
  std::vector<uint64_t> cpus_ = std::vector<uint64_t>(16, 0);  // of this host's ranks met
  std::vector<std::string> host_keys_;                          // by host id
  mutable std::vector<Peer> peers_;  // by world rank
  std::recursive_mutex mutex_;
  std::map<std::vector<int>, uint64_t> seq_;   // per member set
  // Exchanges per (tag, member set) (Note [store exchanges]).
  std::map<std::pair<std::string, std::vector<int>>, uint64_t> xseq_;

  mutable std::mutex failure_mutex_;
  mutable std::optional<RankFailure> failure_;
  mutable std::chrono::steady_clock::time_point next_check_{};
};

}  // namespace symmflow
