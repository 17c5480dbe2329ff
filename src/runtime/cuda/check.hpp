// SF_CUDA_CHECK(call): raises symmflow::Error (code Cuda) naming the call and CUDA's message when
// a CUDA runtime call fails. Private to the cuda backend.
#pragma once

#include <cuda_runtime_api.h>

#include "symmflow/core/error.hpp"

#define SF_CUDA_CHECK(call)                                                             \
  do {                                                                                  \
    cudaError_t sf_err_ = (call);                                                       \
    if (sf_err_ != cudaSuccess)                                                         \
      ::symmflow::throw_error(::symmflow::ErrorCode::Cuda, "{} failed: {} ({})", #call, \
                              cudaGetErrorString(sf_err_), cudaGetErrorName(sf_err_));  \
  } while (0)
