// A kernel of "your own" for the device-signal test (device_api_kernels.cu): copies `n` floats of
// src into the next rank's inbox, raises its signal on `channel`, waits for the previous rank's,
// then writes 2 * inbox into out. ok[0] = put succeeded, ok[1] = wait succeeded.
#pragma once

#include <cstdint>

#include "symmflow/runtime/cuda_signals.hpp"

int launch_ring_kernel(const symmflow::cuda::SignalPads& pads, const float* src, float* next_inbox,
                       const float* inbox, float* out, int64_t n, int next, int prev, int channel,
                       int* ok, void* stream);
