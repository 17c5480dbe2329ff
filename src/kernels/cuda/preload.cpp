// register_kernel_preload (collectives.hpp): the .cu files' kernel loaders, run on a GPU the first
// time a rank thread binds it (runtime/cuda's add_device_init, registered with the first loader as
// the module loads): CUDA loads a kernel lazily at its first launch, and such a load may wait for
// the kernels running on the device, such as a peer's collective spinning on a shared GPU (Note
// [ranks sharing a GPU] in src/runtime/cuda/heap.cpp).
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/cuda/collectives/collectives.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/runtime/cuda.hpp"

namespace symmflow::cuda {

namespace {

// Filled by namespace-scope initializers while the module loads (one thread), read after.
std::vector<int (*)()>& loaders() {
  static std::vector<int (*)()> all;
  return all;
}

void preload_kernels() {
  for (int (*load)() : loaders()) SF_CUDA_CHECK(cudaError_t(load()));
}

}  // namespace

bool register_kernel_preload(int (*load)()) {
  if (loaders().empty()) add_device_init(&preload_kernels);
  loaders().push_back(load);
  return true;
}

}  // namespace symmflow::cuda
