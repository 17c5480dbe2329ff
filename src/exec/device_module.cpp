// Loading device modules (device_module.hpp).
//
// Note [device modules]: the cuda backend (runtime/cuda, kernels/cuda, exec/cuda) is built into
// libsymmflow_cuda.so, which neither libsymmflow.so nor the symmflow command links: cudart,
// cuBLAS, cuBLASLt and NVRTC cost about 0.5 s and 250 MB at start-up, which no CPU command should
// pay.
// - When: the first device_module(DeviceType::cuda) call (the CLI's --device cuda, a binding's
//   device request). A program linked against symmflow_cuda (the GPU tests, the benches, a plugin
//   with GPU kernels) loads it with itself instead; device_module() then finds it registered and
//   loads nothing.
// - What registers, from the module's static initializers as it loads (src/exec/cuda/module.cpp
//   and the SYMMFLOW_LIBRARY_IMPL blocks of kernels/cuda): the registry kernels of the cuda
//   backend, the exec::DeviceBackend factory for cuda devices, and the DeviceModule hooks
//   (device_count, bind_device, to_host). bind_device() registers the device allocator of
//   Storage::allocate and runs the kernels' per-GPU preload.
// - Where: $SYMMFLOW_CUDA_MODULE when set, else libsymmflow_cuda.so in the folder that holds
//   libsymmflow.so (found with dladdr), where the build puts both.
// - Failure modes, each an InvalidUsage naming the caller's `what` and the path: built without
//   CUDA (no module file: "this symmflow was built without the cuda backend"), module file missing
//   in a CUDA build, dlopen failing (a missing CUDA library, an ABI mismatch: dlerror's text), or a
//   library that loads but registers no hooks. A failed load is retried on the next call; a
//   loaded module is never unloaded (its kernels stay registered).
#include "symmflow/exec/device_module.hpp"

#include <mutex>
#include <optional>

#include "runtime/module_file.hpp"
#include "symmflow/core/error.hpp"

namespace symmflow::exec {

namespace {

struct Table {
  std::mutex mutex;  // the hooks; loading holds load_mutex instead, registration this one
  std::optional<DeviceModule> cuda;
};
Table& table() {
  static Table t;
  return t;
}
std::mutex& load_mutex() {
  static std::mutex m;
  return m;
}

const DeviceModule* find(DeviceType type) {
  SF_CHECK(type == DeviceType::cuda, "device modules: {} has none (only cuda is a module)",
           Device{type, 0}.str());
  std::lock_guard lock(table().mutex);
  return table().cuda ? &*table().cuda : nullptr;
}

#ifdef SYMMFLOW_CUDA_MODULE_BUILT
constexpr bool kModuleBuilt = true;
#else
constexpr bool kModuleBuilt = false;
#endif

const runtime_detail::ModuleFile kModule{"SYMMFLOW_CUDA_MODULE", "libsymmflow_cuda.so",
                                         kModuleBuilt, "the cuda backend module",
                                         "the cuda backend", "", ""};

}  // namespace

void register_device_module(DeviceType type, const DeviceModule& module) {
  SF_CHECK(type == DeviceType::cuda, "register_device_module: only cuda is a module");
  SF_CHECK(module.device_count && module.bind_device && module.to_host,
           "register_device_module: every hook of the cuda module must be set");
  std::lock_guard lock(table().mutex);
  table().cuda = module;
}

bool device_module_loaded(DeviceType type) {
  return type == DeviceType::cuda && find(type) != nullptr;
}

std::string device_module_path(DeviceType type) {
  SF_CHECK(type == DeviceType::cuda, "device modules: only cuda is a module");
  return runtime_detail::module_path(kModule);
}

// Note [device modules]
const DeviceModule& device_module(DeviceType type, std::string_view what) {
  if (const DeviceModule* m = find(type)) return *m;
  std::lock_guard lock(load_mutex());
  if (const DeviceModule* m = find(type)) return *m;  // another thread loaded it
  runtime_detail::load_module(kModule, what);
  const DeviceModule* m = find(type);
  SF_CHECK(m, "{}: {} loaded but registered no cuda backend (not a symmflow cuda module)", what,
           device_module_path(type));
  return *m;
}

}  // namespace symmflow::exec
