// Programmatic dependent launch for the kernels that support starting early (Note [early launch]
// in src/exec/streams.cpp): a kernel launched with early = true may begin while the kernel ahead
// of it on the stream ends. Such a kernel calls wait_for_kernel_ahead() before it touches memory
// other than the step's stable operands, then release_kernel_behind(), so that at most one kernel
// per stream runs ahead of its wait. Launched normally, both calls do nothing.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace symmflow::cuda {

__device__ __forceinline__ void wait_for_kernel_ahead() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void release_kernel_behind() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch when early.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, bool early, Args&&... args) {
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = early ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace symmflow::cuda
