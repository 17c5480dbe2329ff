// Inside the api: how it reaches the cuda backend, which is a library built on top of this one
// (src/api/cuda/hooks.cpp registers these when that library is loaded). Until it is, the api
// reports that this build has no GPU. Note [cuda behind hooks]: the backend is becoming a module
// loaded on first use (issue 15, item 8); its loader is the one place to call set_cuda_hooks.
#pragma once

#include "symmflow/core/tensor.hpp"

namespace symmflow::api::detail {

struct CudaHooks {
  int (*device_count)() = nullptr;
  int (*bind_device)() = nullptr;  // binds the calling rank thread; returns the GPU index
  Tensor (*to_host)(const Tensor&) = nullptr;
};
void set_cuda_hooks(const CudaHooks& hooks);
const CudaHooks* cuda_hooks();  // null when no cuda backend is loaded

}  // namespace symmflow::api::detail
