// The cuda module's registration (Note [device modules] in src/exec/device_module.cpp): as
// libsymmflow_cuda.so loads (dlopen on first GPU use, or with a program that links it), this
// registers the exec::DeviceBackend factory for cuda devices (backend.cpp) and the DeviceModule
// hooks through which the CLI and the front door reach the GPU without linking this library. The
// registry kernels of the cuda backend register themselves the same way (SYMMFLOW_LIBRARY_IMPL in
// src/kernels/cuda). Expects libsymmflow.so loaded first (it is this library's dependency).
#include <cuda_runtime_api.h>

#include "exec/cuda/backend.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/exec/device_module.hpp"
#include "symmflow/runtime/cuda.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {

namespace {

Tensor host_copy(const Tensor& t) { return to_host(t); }

// Zeroed on the rank's stream: waited for here, since the caller may write it on another stream.
Tensor symmetric(const Shape& shape, DType dtype, std::string_view group) {
  Tensor t = empty_symmetric(shape, dtype, group);
  synchronize();
  return t;
}

void synchronize_all() { SF_CUDA_CHECK(cudaDeviceSynchronize()); }

void* exchange(void* stream) {
  void* previous = current_stream();
  set_current_stream(stream);
  return previous;
}

const bool kRegistered = [] {
  exec::set_device_backend_factory(DeviceType::cuda, &make_exec_backend);
  exec::DeviceModule module;
  module.device_count = &device_count;
  module.bind_device = &bind_device;
  module.to_host = &host_copy;
  module.empty_symmetric = &symmetric;
  module.exchange_stream = &exchange;
  module.synchronize_device = &synchronize_all;
  module.kernel_choices = &format_kernel_choices;
  exec::register_device_module(DeviceType::cuda, module);
  return true;
}();

}  // namespace

}  // namespace symmflow::cuda
