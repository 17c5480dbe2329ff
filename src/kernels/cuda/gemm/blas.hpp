// The calling rank thread's cuBLAS handle (cublasHandle_t) with its workspace, made on first use
// on the current GPU; raises when first used during a CUDA graph capture. Private to the backend.
#pragma once

#include <string_view>

#include "symmflow/core/tensor.hpp"

namespace symmflow::cuda {

void* blas_handle();

// out = a @ m on cuda::current_stream() (cuBLAS, or the skinny kernel): out and a 2-d, or 3-d
// batches of rows whose batch stride may be anything (a slice of a larger tensor's rows: the
// collective matmuls' chunks); m 2-d ([K, N], shared by the batch). Each row of out and a is
// contiguous; out and a may be peers' memory (peer access).
void gemm_rows(std::string_view op, const Tensor& out, const Tensor& a, const Tensor& m);

}  // namespace symmflow::cuda
