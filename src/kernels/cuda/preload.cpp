// Loads every kernel of the cuda backend on a GPU the first time a rank thread binds it
// (runtime/cuda's add_device_init, registered as the module loads): CUDA loads a kernel lazily at
// its first launch, and such a load may wait for the kernels running on the device, such as a
// peer's collective spinning on a shared GPU (Note [ranks sharing a GPU] in
// src/runtime/cuda/heap.cpp).
#include <cuda_runtime_api.h>

#include "kernels/cuda/collectives.hpp"
#include "kernels/cuda/pointwise.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/runtime/cuda.hpp"

namespace symmflow::cuda {

namespace {

void preload_kernels() {
  SF_CUDA_CHECK(cudaError_t(preload_collective_kernels()));
  SF_CUDA_CHECK(cudaError_t(preload_exchange_kernels()));
  SF_CUDA_CHECK(cudaError_t(preload_allreduce_rmsnorm_kernels()));
  SF_CUDA_CHECK(cudaError_t(preload_pointwise_kernels()));
}

const bool kRegistered = (add_device_init(&preload_kernels), true);

}  // namespace

}  // namespace symmflow::cuda
