// init_mpi: this process becomes one rank of MPI_COMM_WORLD. This is the mpi module's
// implementation (mpi_detail::init_process, registered by module.cpp); symmflow::init_mpi in
// libsymmflow.so loads the module and calls it (Note [mpi module] in src/runtime/mpi_module.cpp).
//
// Contract:
// - The first call initializes MPI (MPI_Init_thread asking for MPI_THREAD_MULTIPLE; whatever level
//   the library grants is enough, since bootstrap operations of a process are serialized) unless
//   the program already did; creates the process-wide Runtime over an MpiBootstrap and makes it
//   current on the calling thread with a RuntimeScope that lives until MPI is finalized. Later
//   calls return the same Runtime (and make it current on the calling thread).
// - Finalization: when init_mpi initialized MPI, an atexit handler calls MPI_Finalize (unless the
//   program already did). Either way the runtime is torn down from inside MPI_Finalize, through a
//   delete callback of an attribute on MPI_COMM_SELF (MPI runs those first, with MPI still fully
//   usable), so every window is freed collectively (Note [freeing shared memory] in
//   mpi_bootstrap.cpp) and later use raises. Finalize on the thread that called init_mpi first.
// - A rank that dies of an uncaught exception poisons the world first (a std::terminate handler),
//   so peers of its host fail fast with PeerFailure naming it instead of waiting for the timeout.
// - No exit(), no MPI_Abort: a rank that cannot proceed throws; mpirun ends the job when a rank
//   exits abnormally. (MPI_Abort would be the last resort for a caller that wants to kill the
//   whole job at once; symmflow never calls it.)
#include <cstdlib>
#include <exception>
#include <mutex>

#include <fmt/format.h>

#include "runtime/exception_text.hpp"
#include "mpi_bootstrap.hpp"
#include "mpi_check.hpp"
#include "mpi_module_impl.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow {

namespace {

struct MpiProcess {
  bool initialized_mpi = false;  // we called MPI_Init_thread, so we call MPI_Finalize
  bool torn_down = false;
  int thread_level = MPI_THREAD_SINGLE;
  MpiBootstrap* bootstrap = nullptr;  // owned by runtime
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<RuntimeScope> scope;  // on the thread that called init_mpi first
};

std::mutex& process_mutex() {
  static std::mutex m;
  return m;
}

// Never destroyed: it must outlive every static destructor and atexit handler that might run
// MPI_Finalize.
MpiProcess* process = nullptr;
thread_local std::unique_ptr<RuntimeScope> other_thread_scope;
std::terminate_handler previous_terminate = nullptr;

void tear_down_runtime() {
  std::lock_guard lock(process_mutex());
  if (!process || process->torn_down) return;
  process->torn_down = true;
  // Marked finished in the pads while their windows exist; teardown frees them. The runtime
  // stays, shut down: stale handles raise instead of touching freed memory (Note [use after
  // shutdown] in runtime.hpp).
  if (process->runtime) process->runtime->shut_down();
  process->bootstrap->teardown();  // collective frees, while MPI still works
}

int on_comm_self_delete(MPI_Comm, int, void*, void*) {
  tear_down_runtime();
  return MPI_SUCCESS;
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Finalize();  // runs on_comm_self_delete first
}

void on_terminate() {
  if (process && !process->torn_down) {
    process->bootstrap->poison(runtime_detail::current_exception_text());
  }
  if (previous_terminate) previous_terminate();
  std::abort();
}

}  // namespace

namespace mpi_detail {

Runtime& init_process(int* argc, char*** argv) {
  std::lock_guard lock(process_mutex());
  if (process) {
    SF_CHECK(!process->torn_down,
             "init_mpi: MPI was already finalized in this process; the mpi "
             "transport cannot be started again");
    if (Runtime::current_or_null() != process->runtime.get())
      other_thread_scope = std::make_unique<RuntimeScope>(*process->runtime);
    return *process->runtime;
  }
  int finalized = 0;
  SF_MPI_CHECK(MPI_Finalized(&finalized));
  SF_CHECK(!finalized, "init_mpi: MPI was already finalized in this process");
  auto p = std::make_unique<MpiProcess>();
  int initialized = 0;
  SF_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    SF_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &p->thread_level));
    p->initialized_mpi = true;
    std::atexit(finalize_at_exit);
  } else {
    SF_MPI_CHECK(MPI_Query_thread(&p->thread_level));
  }
  auto bootstrap = std::make_unique<MpiBootstrap>();
  p->bootstrap = bootstrap.get();
  p->runtime = std::make_unique<Runtime>(std::move(bootstrap));
  p->scope = std::make_unique<RuntimeScope>(*p->runtime);
  int key = MPI_KEYVAL_INVALID;
  SF_MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, on_comm_self_delete, &key, nullptr));
  SF_MPI_CHECK(MPI_Comm_set_attr(MPI_COMM_SELF, key, nullptr));
  previous_terminate = std::set_terminate(on_terminate);
  process = p.release();
  return *process->runtime;
}

}  // namespace mpi_detail

}  // namespace symmflow
