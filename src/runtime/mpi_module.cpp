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

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <mutex>
#include <optional>

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

bool file_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

#ifdef SYMMFLOW_MPI_MODULE_BUILT
constexpr bool kModuleBuilt = true;
#else
constexpr bool kModuleBuilt = false;
#endif

constexpr const char* kInstallHint =
    "the mpi transport needs an MPI library: install Open MPI (Debian, Ubuntu: apt install "
    "openmpi-bin, which brings libopenmpi3 or libopenmpi40 and mpirun; Fedora: dnf install "
    "openmpi), or use the threads or store transport";

}  // namespace

void register_hooks(const Hooks& hooks) {
  SF_CHECK(hooks.init && hooks.time_peer, "mpi_module::register_hooks: every hook must be set");
  std::lock_guard lock(table().mutex);
  table().hooks = hooks;
}

std::string path() {
  if (const char* env = std::getenv("SYMMFLOW_MPI_MODULE"); env && *env) return env;
  Dl_info info{};
  std::string dir = ".";
  if (::dladdr(reinterpret_cast<void*>(&path), &info) && info.dli_fname) {
    const std::string self = info.dli_fname;
    const size_t slash = self.rfind('/');
    if (slash != std::string::npos) dir = self.substr(0, slash);
  }
  return dir + "/libsymmflow_mpi.so";
}

// Note [mpi module]
const Hooks& hooks(std::string_view what) {
  if (const Hooks* h = find()) return *h;
  std::lock_guard lock(load_mutex());
  if (const Hooks* h = find()) return *h;  // another thread loaded it
  const std::string p = path();
  if (!file_exists(p)) {
    if (!kModuleBuilt && !std::getenv("SYMMFLOW_MPI_MODULE")) {
      invalid_usage("{}: this symmflow was built without the mpi transport (no {}; install "
                    "libopenmpi-dev and rebuild)",
                    what, p);
    }
    invalid_usage("{}: the mpi transport's module {} does not exist (SYMMFLOW_MPI_MODULE names "
                  "another path)",
                  what, p);
  }
  if (!::dlopen(p.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
    const char* why = ::dlerror();
    invalid_usage("{}: loading the mpi transport's module {} failed: {}; {}", what, p,
                  why ? why : "unknown error", kInstallHint);
  }
  const Hooks* h = find();
  SF_CHECK(h, "{}: {} loaded but registered no mpi transport (not a symmflow mpi module)", what, p);
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
