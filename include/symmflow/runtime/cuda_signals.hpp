// The signal pads of a cuda::Communicator as a plain struct (no CUDA or C++20 types), for kernels
// of your own: get it from Communicator::signal_pads() on the host, pass it by value to a kernel,
// and signal or wait there with the functions of cuda_device.cuh. The pads are the ones
// symm_mem::put_signal / wait_signal use (Note [signal protocol] in group.hpp): a signal raised
// in a kernel can be consumed by the op and the other way round.
#pragma once

#include <cstdint>

namespace symmflow::cuda {

struct SignalPads {
  uint32_t* pad[8] = {};  // every member's pad (group rank order): channels x 8 sources of uint32
  int rank = 0;           // this member
  int world = 0;
  int channels = 0;
  uint64_t timeout_ns = 0;  // how long a device wait spins before giving up
};

}  // namespace symmflow::cuda
