// init_store / init_store_from_env: this process becomes one rank of a world that meets through a
// key-value store (contract in runtime.hpp). The process-wide runtime mirrors init_mpi's: created
// once, current on the calling thread, shut down by an atexit handler (so the StoreBootstrap's exit
// protocol runs while the process still works; the runtime stays, refusing later calls: Note [use
// after shutdown] in runtime.hpp), and a std::terminate handler poisons the world so peers fail
// fast with PeerFailure naming this rank.
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <mutex>

#include <fmt/format.h>

#include "runtime/exception_text.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow {

namespace {

struct StoreProcess {
  StoreOptions options;
  int pid = 0;  // the process that joined (Note [forked children] in store_bootstrap.cpp)
  Bootstrap* bootstrap = nullptr;  // owned by runtime
  std::unique_ptr<Runtime> runtime;  // never destroyed (Note [use after shutdown])
  std::unique_ptr<RuntimeScope> scope;  // on the thread that called init_store first
};

std::mutex& process_mutex() {
  static std::mutex m;
  return m;
}

StoreProcess* process = nullptr;  // never destroyed: outlives static destructors
thread_local std::unique_ptr<RuntimeScope> other_thread_scope;
std::terminate_handler previous_terminate = nullptr;

// Leaves the world (StoreBootstrap's exit protocol) but keeps the runtime, so handles that outlive
// it raise "symmflow has shut down" (Note [use after shutdown] in runtime.hpp). A forked child
// inherits this handler and does nothing (Note [forked children] in store_bootstrap.cpp).
void tear_down_at_exit() {
  std::lock_guard lock(process_mutex());
  if (!process || ::getpid() != process->pid) return;
  process->runtime->shut_down();
}

void on_terminate() {
  if (process && !process->runtime->is_shut_down()) {
    process->bootstrap->poison(runtime_detail::current_exception_text());
  }
  if (previous_terminate) previous_terminate();
  std::abort();
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  SF_CHECK(v && *v,
           "init_store_from_env: {} is not set (launchers such as torchrun set RANK and "
           "WORLD_SIZE)",
           name);
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  SF_CHECK(*end == '\0' && x >= 0 && x <= 65536,
           "init_store_from_env: {}={}: expected an integer in [0, 65536]", name, v);
  return int(x);
}

}  // namespace

Runtime& init_store(const StoreOptions& options) {
  std::lock_guard lock(process_mutex());
  if (process) {
    SF_CHECK(!process->runtime->is_shut_down(),
             "init_store: symmflow has shut down: this process left its store world (at exit or "
             "by shutdown), and a process joins one world once");
    SF_CHECK(options.rank == process->options.rank &&
                 options.world_size == process->options.world_size &&
                 options.prefix == process->options.prefix,
             "init_store: this process already is rank {} of {} in world '{}'; one world per "
             "process",
             process->options.rank, process->options.world_size, process->options.prefix);
    if (Runtime::current_or_null() != process->runtime.get())
      other_thread_scope = std::make_unique<RuntimeScope>(*process->runtime);
    return *process->runtime;
  }
  auto p = std::make_unique<StoreProcess>();
  p->options = options;
  p->pid = ::getpid();
  std::unique_ptr<Bootstrap> bootstrap = make_store_bootstrap(options);
  p->bootstrap = bootstrap.get();
  p->runtime = std::make_unique<Runtime>(std::move(bootstrap));
  p->scope = std::make_unique<RuntimeScope>(*p->runtime);
  tunables();  // constructed before the handler is registered, so destroyed after it runs
  std::atexit(tear_down_at_exit);
  previous_terminate = std::set_terminate(on_terminate);
  process = p.release();
  return *process->runtime;
}

void shutdown_store() { tear_down_at_exit(); }

Runtime& init_store_from_env() {
  const char* spec = std::getenv("SYMMFLOW_STORE");
  SF_CHECK(spec && *spec,
           "init_store_from_env: SYMMFLOW_STORE is not set (file:<directory> or "
           "tcp:<host>:<port>)");
  StoreOptions o;
  o.rank = env_int("RANK");
  o.world_size = env_int("WORLD_SIZE");
  const char* prefix = std::getenv("SYMMFLOW_STORE_PREFIX");
  if (prefix && *prefix) o.prefix = prefix;
  auto connect = std::chrono::milliseconds(int64_t(tunables().timeout_s * 1000));
  o.store = open_store(spec, o.rank, connect, o.prefix);  // bound into the TCP handshake
  return init_store(o);
}

}  // namespace symmflow
