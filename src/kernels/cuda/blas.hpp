// The calling rank thread's cuBLAS handle (cublasHandle_t) with its workspace, made on first use
// on the current GPU; raises when first used during a CUDA graph capture. Private to the backend.
#pragma once

namespace symmflow::cuda {

void* blas_handle();

}  // namespace symmflow::cuda
