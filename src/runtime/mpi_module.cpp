// Loading the mpi transport's module (mpi_module.hpp), and init_mpi / mpi_available on top of it.
//
// Note [mpi module]: the mpi transport (src/runtime/mpi) is built into libsymmflow_mpi.so, which
// neither libsymmflow.so, the Python module nor the symmflow command links, so that `import
// symmflow`, the numpy API, the torch backend and every other transport work on a machine without
// an MPI library (a wheel installed anywhere: issue 25). It is the pattern of the cuda backend
// (Note [device modules] in src/exec/device_module.cpp), one layer lower: the runtime loads it.
// - When: the first hooks() call: init_mpi() (the CLI's --transport mpi, the MPI tests,
//   api::join_mpi), mpi_available(), and `symmflow bench collectives`' MPI peers.
// - What registers, from the module's static initializer as it loads (src/runtime/mpi/module.cpp):
//   the Hooks (init, time_peer). dlopen uses RTLD_GLOBAL, so libmpi's symbols are global for the
//   MCA components Open MPI itself loads later.
// - Where: $SYMMFLOW_MPI_MODULE when set, else libsymmflow_mpi.so in the folder of libsymmflow.so
//   (dladdr), where both the build tree and the wheel put it.
// - Failure modes, each an InvalidUsage naming the caller's `what` and the path: built without
//   MPI (no module file: "this symmflow was built without the mpi transport"), module file
//   missing, dlopen failing (typically "libmpi.so.40: cannot open shared object file"), with how
//   to install MPI; a library that loads but registers nothing. A failed load is retried on the
//   next call (MPI installed meanwhile); a loaded module is never unloaded.
#include "runtime/mpi_module.hpp"

#include <mutex>
#include <optional>

#include "runtime/module_file.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow {

namespace mpi_module {

namespace {

struct Table {
  std::mutex mutex;  // the hooks; loading holds load_mutex instead, registration this one
  std::optional<Hooks> hooks;
};
Table& table() {
  static Table t;
  return t;
}
std::mutex& load_mutex() {
  static std::mutex m;
  return m;
}

const Hooks* find() {
  std::lock_guard lock(table().mutex);
  return table().hooks ? &*table().hooks : nullptr;
}

#ifdef SYMMFLOW_MPI_MODULE_BUILT
constexpr bool kModuleBuilt = true;
#else
constexpr bool kModuleBuilt = false;
#endif

const runtime_detail::ModuleFile kModule{
    "SYMMFLOW_MPI_MODULE", "libsymmflow_mpi.so", kModuleBuilt, "the mpi transport's module",
    "the mpi transport", "; install libopenmpi-dev and rebuild",
    "; the mpi transport needs an MPI library: install Open MPI (Debian, Ubuntu: apt install "
    "openmpi-bin, which brings libopenmpi3 or libopenmpi40 and mpirun; Fedora: dnf install "
    "openmpi), or use the threads or store transport"};

}  // namespace

void register_hooks(const Hooks& hooks) {
  SF_CHECK(hooks.init && hooks.time_peer, "mpi_module::register_hooks: every hook must be set");
  std::lock_guard lock(table().mutex);
  table().hooks = hooks;
}

std::string path() { return runtime_detail::module_path(kModule); }

// Note [mpi module]
const Hooks& hooks(std::string_view what) {
  if (const Hooks* h = find()) return *h;
  std::lock_guard lock(load_mutex());
  if (const Hooks* h = find()) return *h;  // another thread loaded it
  runtime_detail::load_module(kModule, what);
  const Hooks* h = find();
  SF_CHECK(h, "{}: {} loaded but registered no mpi transport (not a symmflow mpi module)", what,
           path());
  return *h;
}

bool available() {
  try {
    hooks("mpi_available");
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace mpi_module

Runtime& init_mpi(int* argc, char*** argv) {
  return mpi_module::hooks("init_mpi").init(argc, argv);
}

bool mpi_available() {
  return mpi_module::available();
}

}  // namespace symmflow
