// Host <-> device copies of tensors and the early-launch state of the step being enqueued
// (kernels/cuda.hpp). to_host makes a strided device tensor dense with aten::clone (a kernel of
// this backend) before the copy; to_device copies a host tensor onto the calling thread's GPU.
#include <cuda_runtime_api.h>

#include "runtime/cuda/check.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {

namespace {
const StepLaunch kNotEarly;
thread_local const StepLaunch* tls_launch = &kNotEarly;
}  // namespace

bool StepLaunch::is_stable(const void* p, size_t bytes) const {
  const char* lo = static_cast<const char*>(p);
  for (const auto& [a, b] : stable) {
    if (a <= lo && lo + bytes <= b) return true;
  }
  return false;
}
const StepLaunch& current_launch() { return *tls_launch; }
void set_current_launch(const StepLaunch* launch) { tls_launch = launch ? launch : &kNotEarly; }

Tensor to_host(const Tensor& t) {
  if (t.device().type != DeviceType::cuda) return t;
  const Tensor src = t.is_contiguous() ? t : aten::clone(t);
  Tensor host = Tensor::uninitialized(t.shape(), t.dtype());
  synchronize();  // before the pageable copy (Note [ranks sharing a GPU] in heap.cpp)
  if (host.nbytes() > 0) {
    SF_CUDA_CHECK(cudaMemcpyAsync(host.raw_data(), src.raw_data(), host.nbytes(),
                                  cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(current_stream())));
  }
  synchronize();
  return host;
}

Tensor to_device(const Tensor& t) {
  int device = 0;
  SF_CUDA_CHECK(cudaGetDevice(&device));
  Tensor src = t.contiguous();
  Tensor d = Tensor::uninitialized(t.shape(), t.dtype(), Device::cuda(device));
  if (d.nbytes() > 0) {
    SF_CUDA_CHECK(cudaMemcpyAsync(d.raw_data(), src.raw_data(), d.nbytes(),
                                  cudaMemcpyHostToDevice, static_cast<cudaStream_t>(current_stream())));
    synchronize();  // src may be a temporary
  }
  return d;
}

}  // namespace symmflow::cuda
