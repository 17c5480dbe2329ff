// The per-rank runtime: this rank's bootstrap and groups, and how ranks are started.
//
//   symmflow::run_threads(4, [](symmflow::Runtime& rt) {
//     rt.new_group("tp", {0, 1, 2, 3});          // collective among the members
//     Tensor x = symmflow::empty_symmetric({1024}, DType::f32, "tp");
//     ...  symmflow::call("symm_mem::one_shot_all_reduce", {x, "sum", "tp"});
//   });
//
// Under mpirun, `Runtime& rt = symmflow::init_mpi();` makes this process one rank (finalized at
// exit). Processes started otherwise (torchrun, a test) meet through a key-value store:
// `symmflow::init_store({store, rank, world_size})`, or `init_store_from_env()` with
// SYMMFLOW_STORE=file:<dir> | tcp:<host>:<port> and RANK / WORLD_SIZE as torchrun sets them
// (docs/runtime.md). Ops find the current rank's runtime through Runtime::current() (thread-local
// on threads). Group names are resolved once per call to a Group handle.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "symmflow/ops/group_size.hpp"
#include "symmflow/runtime/bootstrap.hpp"
#include "symmflow/runtime/group.hpp"
#include "symmflow/runtime/store.hpp"

namespace symmflow {

// Note [use after shutdown]: a process world (init_store, init_mpi) is left at exit by a handler
// (atexit; the Python package's own, before the interpreter goes), and may be left earlier by
// shutdown_store(). Handles on the runtime outlive it: a Python atexit handler registered before
// symmflow's (atexit runs them in reverse) or a thread still running may call in afterwards. The
// runtime is therefore never destroyed there: shut_down() leaves the world and marks the runtime
// and its groups shut down, and every later use raises InvalidUsage "symmflow has shut down"
// instead of touching freed memory (it was a SIGSEGV on every rank).
class Runtime {
 public:
  explicit Runtime(std::unique_ptr<Bootstrap> bootstrap);
  ~Runtime();
  // Marks every group destroyed and, when `finished`, this rank as finished in its pads (Note
  // [peers that left] in group.hpp); the destructor does it unless it was done. A transport that
  // frees the pads' memory before the runtime is destroyed (MPI's windows at MPI_Finalize) calls
  // it first.
  void leave(bool finished = true);
  // Leaves the world for good, as a process's exit does (Note [use after shutdown]): leave(), then
  // the transport's exit protocol (Bootstrap::depart). The runtime itself stays, so handles on it
  // (api::Rank, a Session, a group) raise InvalidUsage "symmflow has shut down" when used.
  void shut_down();
  bool is_shut_down() const { return shut_down_.load(std::memory_order_acquire); }
  // Poisons the world with `why` (Bootstrap::poison) and remembers it: leaving afterwards marks
  // this rank's groups failed with `why`, not finished (Note [poisoned groups] in group.hpp).
  void abort(const std::string& why);

  // The runtime of the calling rank; throws InvalidUsage when the thread is not a rank.
  static Runtime& current();
  static Runtime* current_or_null();

  int rank() const { return bootstrap_->rank(); }
  int world_size() const { return bootstrap_->world_size(); }
  Bootstrap& bootstrap() const { return *bootstrap_; }

  // Collective among `ranks` (global ranks; every member calls with the same name and list, and
  // validation says what differed). Non-members need not call. "world" exists from the start on
  // threads and MPI, and is made on its first use on the store transport, a collective of every
  // rank (Note [groups of members only] in runtime.cpp).
  std::shared_ptr<Group> new_group(const std::string& name, std::vector<int> ranks);
  // Throws InvalidUsage "unknown group 'x' (known: world, tp)".
  const std::shared_ptr<Group>& group(std::string_view name) const;
  bool has_group(std::string_view name) const;
  // Marks the group destroyed; later use of it or of its tensors raises InvalidUsage.
  void destroy_group(std::string_view name);

 private:
  friend class RuntimeScope;
  void check_running(std::string_view op) const;  // Note [use after shutdown]
  std::unique_ptr<Bootstrap> bootstrap_;
  // "world" may be made on its first use (Note [groups of members only] in runtime.cpp).
  mutable std::map<std::string, std::shared_ptr<Group>, std::less<>> groups_;
  bool left_ = false;
  std::atomic<bool> shut_down_{false};  // read by any thread that still calls in
  std::optional<std::string> aborted_;  // abort()'s words
};

// Makes `rt` the current runtime of this thread for the scope's lifetime.
// Also resolves group sizes for shape functions (group_size.hpp).
class RuntimeScope {
 public:
  explicit RuntimeScope(Runtime& rt);
  ~RuntimeScope();

 private:
  Runtime* previous_;
  std::unique_ptr<ScopedGroupSizeResolver> groups_;
};

struct ThreadsOptions {
  ThreadsOptions(double timeout = -1, std::vector<int> host_ids = {})
      : timeout_s(timeout), hosts(std::move(host_ids)) {}
  double timeout_s;  // <0: tunables().timeout_s
  // Simulated hosts (Note [hosts] in bootstrap.hpp): the host id of each rank, e.g. {0, 0, 1, 1};
  // empty: one host. Ranks of different ids share no memory: a group spanning them runs its
  // collectives through the exchange (Note [spanning groups] in group.hpp).
  std::vector<int> hosts;
};

// Runs fn on `world_size` ranks, one thread each, and waits for all. A rank that throws poisons
// the world, so peers waiting on it fail fast with PeerFailure naming it. Returns each rank's
// exception (null when it finished).
std::vector<std::exception_ptr> run_threads_collect(int world_size,
                                                    const std::function<void(Runtime&)>& fn,
                                                    const ThreadsOptions& options = {});
// The same, rethrowing the first rank's error (in rank order) prefixed with "rank N: ".
void run_threads(int world_size, const std::function<void(Runtime&)>& fn,
                 const ThreadsOptions& options = {});

// MPI: this process becomes one rank of MPI_COMM_WORLD (MPI_Init_thread on first call). The
// transport is a module (libsymmflow_mpi.so) loaded here on first use, so nothing else needs an
// MPI library (Note [mpi module] in src/runtime/mpi_module.cpp). Throws InvalidUsage saying why
// and how to install MPI when it cannot be loaded (built without MPI, no libmpi on this machine).
Runtime& init_mpi(int* argc = nullptr, char*** argv = nullptr);
// Whether init_mpi can start the transport (loads the module; never throws).
bool mpi_available();

// Store: this process becomes rank `options.rank` of a world that meets through
// `options.store` (collective: returns once every rank joined). Like init_mpi: one world per
// process, current on the calling thread (later calls return it and make it current there), torn
// down at exit (a rank that serves a TcpStore waits, bounded, for its peers to finish first); an
// uncaught exception poisons the world before the process dies. Throws InvalidUsage for bad
// options or a second call with other options.
Runtime& init_store(const StoreOptions& options);
// The same from the environment, for launchers: SYMMFLOW_STORE (file:<directory> or
// tcp:<host>:<port>, served by rank 0), RANK and WORLD_SIZE (as torchrun sets them), and
// SYMMFLOW_STORE_PREFIX (default "symmflow"). Throws InvalidUsage naming a missing or bad variable.
Runtime& init_store_from_env();
// Tears the store world of this process down now (its exit protocol), as the atexit handler would;
// a no-op without one. For hosts whose store outlives no atexit handler (the Python module's
// callback store needs the interpreter, which is gone by then).
void shutdown_store();

}  // namespace symmflow
