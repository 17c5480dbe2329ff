// The mpi transport as a module loaded on first use (private header of the runtime layer).
//
//   const mpi_module::Hooks& mpi = mpi_module::hooks("init_mpi");   // loads it, or InvalidUsage
//   Runtime& rt = mpi.init(argc, argv);
//
// Contract (Note [mpi module] in mpi_module.cpp):
// - libsymmflow.so does not link libmpi. The transport (src/runtime/mpi) is built into
//   libsymmflow_mpi.so, which links libmpi and registers its hooks from a static initializer as it
//   loads; hooks() dlopens it the first time the mpi transport is asked for (init_mpi, join_mpi,
//   mpi_available, `symmflow bench`'s MPI peers) and returns the registered hooks.
// - hooks() raises InvalidUsage naming `what`, the module's path and why it could not be loaded
//   (built without MPI, file missing, dlopen's error such as a missing libmpi.so.40) and how to
//   install MPI. A failed load is retried on the next call; a loaded module is never unloaded.
// - Programs that link libsymmflow_mpi.so themselves register the hooks at start-up; nothing is
//   loaded then.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace symmflow {

class Runtime;

namespace mpi_module {

struct Hooks {
  // init_mpi's implementation (contract in src/runtime/mpi/mpi_init.cpp).
  Runtime& (*init)(int* argc, char*** argv) = nullptr;
  // MPI's own collective on MPI_COMM_WORLD as the reference of `symmflow bench collectives`:
  // `peer` is "MPI_Allreduce", "MPI_Reduce_scatter_block" or "MPI_Allgather" on f32, out of place,
  // over `bytes` (each rank's share is bytes / world for the latter two). Runs `warmup` then
  // `iters` calls, each after an MPI_Barrier, and returns every timed call's duration in
  // microseconds on the slowest rank (collective: every rank gets the same list).
  std::vector<double> (*time_peer)(const std::string& peer, int64_t bytes, int warmup,
                                   int iters) = nullptr;
};

// Called by the module as it loads; every hook must be set.
void register_hooks(const Hooks& hooks);
// The hooks, loading the module first when needed (InvalidUsage naming `what` when it cannot).
const Hooks& hooks(std::string_view what);
// Whether the module is loaded or can be loaded now (loads it). Never throws.
bool available();
// $SYMMFLOW_MPI_MODULE when set, else libsymmflow_mpi.so beside libsymmflow.so.
std::string path();

}  // namespace mpi_module
}  // namespace symmflow
