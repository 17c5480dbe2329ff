// The `mpi` transport's Bootstrap: one object per process, over MPI_COMM_WORLD (private header).
//
// Contract:
// - allgather: per member set, a communicator (MPI_Comm_create_group on first use, cached) and a
//   sequence number, like the threads transport. The exchange is MPI_Iallgather of lengths then
//   MPI_Iallgatherv of (key, data), polled with MPI_Test inside a Waiter loop: bounded by
//   timeout_s(), and it ends early with PeerFailure when a rank of this host poisoned the world.
//   Every member compares the keys; a rank that is in another collective makes every member
//   raise InvalidUsage listing what each rank was doing. A communicator whose exchange timed out
//   is unusable afterwards (an MPI collective cannot be cancelled): later use raises Mpi.
// - The first use of a member set other than the world and single ranks is preceded by a bounded
//   point-to-point rendezvous, so that MPI_Comm_create_group (blocking) never waits for a rank
//   that is not coming, and ranks that set up member sets in different orders raise.
// - Hosts: MPI_COMM_TYPE_SHARED, or the SYMMFLOW_HOST_ID a test set per process (Note [hosts]).
// - allocate_shared: members must share one host; then
//   MPI_Win_allocate_shared on the member communicator, peers through MPI_Win_shared_query,
//   memory zeroed before any member returns. Members on several hosts raise InvalidUsage (a group
//   that spans hosts places its memory per host: Note [spanning groups] in group.hpp).
// - poison / failure: a control block in a shared-memory window per host, allocated at start,
//   holds the first failed world rank and a message (published atomically). Ranks on other hosts
//   do not see it (they time out instead).
// - Windows live until teardown (Note [freeing shared memory] in mpi_bootstrap.cpp).
// - Bootstrap operations of one process are serialized by a mutex (MPI_THREAD_SERIALIZED is
//   enough); failure() takes no lock.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mpi_check.hpp"
#include "symmflow/runtime/bootstrap.hpp"

namespace symmflow {

class Waiter;

class MpiBootstrap : public Bootstrap {
 public:
  MpiBootstrap();            // collective over MPI_COMM_WORLD; MPI must be initialized
  ~MpiBootstrap() override;  // teardown(); never throws

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  Transport transport() const override { return Transport::mpi; }
  int local_ranks() const override { return local_ranks_; }
  int local_cpus() const override { return local_cpus_; }
  double timeout_s() const override;

  std::vector<std::string> allgather(const std::vector<int>& members, const std::string& key,
                                     std::string data, std::string_view op) override;
  std::shared_ptr<SharedRegion> allocate_shared(const std::vector<int>& members,
                                                const std::string& key, size_t bytes,
                                                std::string_view op) override;
  void poison(const std::string& why) override;
  std::optional<RankFailure> failure() const override;

  const std::string& host(int world_rank) const { return hosts_.at(size_t(world_rank)); }
  int host_of(int rank) const override { return host_number_.at(size_t(rank)); }
  std::string host_name(int rank) const override { return host(rank); }
  // Frees every window and communicator (collective; see the Note). Idempotent. Later calls of
  // allgather / allocate_shared raise InvalidUsage.
  void teardown() noexcept;

 private:
  struct MemberComm {
    MPI_Comm comm = MPI_COMM_NULL;
    bool broken = false;
    std::string why;  // why it is broken
  };
  MemberComm& member_comm(const std::vector<int>& members, std::string_view op);
  void rendezvous(const std::vector<int>& members, std::string_view op);
  // Polls `req` until it completes; on Timeout / PeerFailure keeps `keep` alive forever (MPI may
  // still write into it), marks `mc` broken and rethrows.
  void wait(MPI_Request& req, Waiter& waiter, const std::vector<int>& members, MemberComm& mc,
            std::shared_ptr<void> keep);
  void check_usable(std::string_view op) const;
  // Progress word of this rank (Note [naming the missing rank]).
  void set_progress(uint64_t tag);
  int absent_member(const std::vector<int>& members) const;

  int rank_ = 0;
  int size_ = 0;
  int local_ranks_ = 1;  // ranks on this host
  int local_cpus_ = 1;   // CPUs of the union of their CPU sets
  bool torn_down_ = false;
  MPI_Comm world_ = MPI_COMM_NULL;  // dup of MPI_COMM_WORLD: exchanges among all ranks
  MPI_Comm p2p_ = MPI_COMM_NULL;    // dup of MPI_COMM_WORLD: rendezvous and teardown barrier
  MPI_Comm node_ = MPI_COMM_NULL;   // ranks of this host
  MPI_Win control_win_ = MPI_WIN_NULL;
  char* control_ = nullptr;         // Note [control block]
  std::vector<int> node_index_;     // world rank -> index on this host, -1 elsewhere
  std::vector<std::string> hosts_;  // world rank -> host name
  std::vector<int> host_id_;        // world rank -> lowest world rank of its host
  std::vector<int> host_number_;    // world rank -> host number (Note [hosts])
  std::recursive_mutex mutex_;
  std::map<std::vector<int>, MemberComm> comms_;
  std::map<std::vector<int>, uint64_t> seq_;  // per member set
  std::vector<MPI_Win> windows_;              // in creation order
  std::vector<std::shared_ptr<void>> abandoned_;
};

}  // namespace symmflow
