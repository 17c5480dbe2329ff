// Bootstrap: how the ranks of one world find each other. One object per rank.
//
// `threads` runs N ranks as threads of one process (the default, no set-up); `mpi` runs them as
// MPI processes started by mpirun; `store` runs them as processes started by anything (torchrun, a
// test, a serving engine) that meet through a key-value store (store.hpp). Each lives in a folder
// of its own (src/runtime/threads, mpi, store). All offer the same things to the layers above: an
// all-gather of small byte strings among a set of ranks, collective allocation of memory that every
// member can load and store (process memory on threads, an MPI shared-memory window on mpi, host
// shared memory on store), and a failure flag that poisons the world when a rank dies so that
// peers fail fast.
// Every wait is bounded by tunables().timeout_s and checks the failure flag.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace symmflow {

// Memory allocated collectively by the members of a group: this rank's block and every member's
// block as this rank can address it. When the memory goes back is the transport's: Note [freeing
// shared memory] in threads/threads_bootstrap.cpp and mpi/mpi_bootstrap.cpp, Note [store shared
// memory] in store/host_memory.hpp (all under src/runtime).
class SharedRegion {
 public:
  virtual ~SharedRegion() = default;
  virtual void* local() const = 0;
  virtual void* peer(int member_index) const = 0;  // index into the member list
  virtual size_t bytes() const = 0;
};

// Which transport a Bootstrap is. Callers compare this, never the printed name.
enum class Transport { threads, mpi, store };
// "threads", "mpi", "store": for messages only.
const char* transport_name(Transport t);

struct RankFailure {
  int rank = -1;
  std::string what;
};

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Transport transport() const = 0;
  const char* transport_name() const { return symmflow::transport_name(transport()); }
  // Ranks of this world on this rank's host (all of them on threads): waits compare it with the
  // usable CPUs to tell whether spinning can help.
  virtual int local_ranks() const = 0;
  // CPUs the ranks of this host may run on together (threads: the process's CPUs; mpi: the union
  // of the local ranks' CPU sets, so a rank bound to one core by mpirun still counts the node).
  virtual int local_cpus() const = 0;
  // Bound of every wait of this world, in seconds (tunables().timeout_s unless overridden).
  virtual double timeout_s() const = 0;

  // Note [hosts]: which host each rank runs on, learnt at rendezvous (host names exchanged) or
  // set per rank for tests (SYMMFLOW_HOST_ID on mpi and store, ThreadsOptions::hosts on threads;
  // docs/multihost.md). Hosts are numbered 0, 1, ... in the order of their lowest rank. Ranks of
  // one host can map each other's memory; ranks of two hosts cannot, and meet only through
  // exchange(). A world on one host says 0 for every rank.
  virtual int host_of(int rank) const {
    (void)rank;
    return 0;
  }
  // Whether host_of answers for every rank without waiting: false on the store transport until
  // this rank met every peer (Note [groups of members only] in runtime.cpp).
  virtual bool met_everyone() const { return true; }
  // The host's name, for messages ("node7", "host 1 (SYMMFLOW_HOST_ID)").
  virtual std::string host_name(int rank) const {
    (void)rank;
    return "this host";
  }
  // The network engine (Note [spanning groups] in group.hpp): an all-gather of byte strings among
  // `members` (sorted global ranks, this one included) for the data of collectives whose group
  // spans hosts, called once per collective and so kept in no store: MPI's MPI_Iallgatherv, the
  // store's keys written again every other call, threads' memory. `tag` (the group's name) keeps
  // the exchanges of two groups of the same members apart: members that call them in another
  // order raise or time out, never pair one group's data with the other's. Every member calls the
  // same sequence of exchanges of a tag; each gets every member's data in member order.
  virtual std::vector<std::string> exchange(const std::vector<int>& members, const std::string& tag,
                                            std::string data, std::string_view op) {
    return allgather(members, "exchange:" + tag, std::move(data), op);
  }

  // Every rank of `members` (sorted global ranks, including this one) calls this with the same
  // `key`; each gets every member's `data`, in member order. `op` names the caller in errors.
  virtual std::vector<std::string> allgather(const std::vector<int>& members,
                                             const std::string& key, std::string data,
                                             std::string_view op) = 0;
  // Returns once every member called it with the same `key` (an allgather of nothing).
  void barrier(const std::vector<int>& members, const std::string& key, std::string_view op) {
    allgather(members, "barrier:" + key, std::string(), op);
  }
  // Collective: every member allocates `bytes` (zeroed) and learns the others' addresses.
  virtual std::shared_ptr<SharedRegion> allocate_shared(const std::vector<int>& members,
                                                        const std::string& key, size_t bytes,
                                                        std::string_view op) = 0;

  // Leaves the world for good: the transport's exit protocol (the store's exit key and its wait
  // for peers). Idempotent; a transport whose destructor does it runs it once (Runtime::shut_down).
  virtual void depart() {}
  // Marks this rank failed so that peers waiting on it raise PeerFailure naming it.
  virtual void poison(const std::string& why) = 0;
  // The first rank of the world that failed, if any.
  virtual std::optional<RankFailure> failure() const = 0;
  // The same, read now even where failure() is rate-limited: asked before blaming a peer that left
  // cleanly, as the world's failure is the cause a waiter must report (Note [the cause before the
  // departure] in wait.cpp).
  virtual std::optional<RankFailure> failure_now() const { return failure(); }
  // Whether `rank` has finished cleanly (its rank function returned), where the transport knows
  // it: threads does; the others say false (their waits in groups learn it from the signal pads,
  // Note [peers that left] in group.hpp).
  virtual bool finished(int rank) const {
    (void)rank;
    return false;
  }
};

}  // namespace symmflow
