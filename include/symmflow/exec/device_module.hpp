// Device modules: the GPU backend is a shared library of its own (libsymmflow_cuda.so), loaded the
// first time a GPU is asked for, so that CPU work never maps the CUDA libraries (Note [device
// modules] in src/exec/device_module.cpp).
//
//   const exec::DeviceModule& cuda = exec::device_module(DeviceType::cuda, "--device cuda");
//   if (cuda.device_count() == 0) ...;          // no GPU visible
//   Device d = Device::cuda(cuda.bind_device()); // on each rank thread, before its Executable
//   Tensor h = cuda.to_host(result);             // waits for the rank's stream
//
// Expects: called from any thread (loading is serialized). Guarantees: the module is loaded at
// most once and never unloaded; when device_module() returns, the module's registry kernels
// (`impl`s of its backend), its exec::DeviceBackend factory and these hooks are registered.
// Refuses: a device type without a module (cpu), a module that is missing or fails to load, or
// one that loads but registers no hooks: InvalidUsage naming `what`, the path and the reason.
#pragma once

#include <string>
#include <string_view>

#include "symmflow/core/device.hpp"
#include "symmflow/core/tensor.hpp"

namespace symmflow::exec {

// What a device module registers when it is loaded (from a static initializer of the module).
struct DeviceModule {
  int (*device_count)() = nullptr;              // devices visible to this process (0: none)
  int (*bind_device)() = nullptr;               // binds the calling rank thread; its device index
  Tensor (*to_host)(const Tensor&) = nullptr;   // a host copy; waits for the thread's stream
  // A zeroed tensor in a new symmetric heap of `group` on the thread's GPU (collective).
  Tensor (*empty_symmetric)(const Shape&, DType, std::string_view group) = nullptr;
  // Makes `stream` (a cudaStream_t of the thread's GPU; null: the legacy default stream) the
  // stream the thread's eager kernels run on, and returns the one it replaces.
  void* (*exchange_stream)(void* stream) = nullptr;
  // Waits for everything this process queued on the thread's GPU; raises what failed.
  void (*synchronize_device)() = nullptr;
  // The kernels chosen by measurement so far (Note [measured kernel choice]), one per line.
  std::string (*kernel_choices)() = nullptr;
};
void register_device_module(DeviceType type, const DeviceModule& module);

// The module of `type`, loaded now if it was not (see the contract above). `what` starts the
// error message ("--device cuda").
const DeviceModule& device_module(DeviceType type, std::string_view what);
// Whether the module of `type` is loaded (never loads it).
bool device_module_loaded(DeviceType type);
// Where the module of `type` is looked for: $SYMMFLOW_CUDA_MODULE, else libsymmflow_cuda.so in
// the folder of libsymmflow.so.
std::string device_module_path(DeviceType type);

}  // namespace symmflow::exec
