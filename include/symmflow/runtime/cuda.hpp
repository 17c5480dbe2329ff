// The cuda transport: GPU symmetric memory over NVLink (device heap, peer access, memory shared
// between processes; device memory and streams in cuda_memory.hpp, the signal pads' plain struct
// in cuda_signals.hpp). The collectives that use it are kernels-layer code:
// symmflow/kernels/cuda.hpp (cuda::Communicator); this layer launches no kernel.
//
// One process drives every local GPU with one rank thread per GPU (symmflow::run_threads): each
// rank thread calls cuda::bind_device() first, which selects GPU (rank % device_count) and enables
// peer access to every other GPU, so a kernel can load and store its peers' memory directly.
//
//   symmflow::run_threads(2, [](symmflow::Runtime& rt) {
//     symmflow::cuda::bind_device();
//     auto heap = symmflow::cuda::DeviceHeap::allocate(rt.group("world"), 1 << 20);
//     void* peer = heap->peer(1);   // rank 1's copy, addressable from this GPU
//   });
//
// A DeviceHeap is the GPU twin of SymmetricHeap: one collective allocation of the same size on
// every member, behind the same validated rendezvous (allocation number, size, group; a mismatch
// raises on every rank naming what differed), with every member's device address.
//
// Defined in the library symmflow_cuda, built when a CUDA compiler is found (cmake/Cuda.cmake;
// SYMMFLOW_HAVE_CUDA is then defined for its users) and loaded on first GPU use by programs that
// do not link it (Note [device modules] in src/exec/device_module.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "symmflow/runtime/group.hpp"

namespace symmflow::cuda {

// GPUs visible to this process; 0 without a driver, without a GPU or without the cuda backend.
int device_count();
// Selects GPU (rank % device_count()) for the calling rank thread, enables peer access to every
// other GPU, gives the thread its own stream (cuda_memory.hpp) and registers the device allocator
// (Storage::allocate on cuda devices). Returns the device index. Several ranks may share a GPU
// (more rank threads than GPUs): the collectives then keep to a share of the GPU's
// multiprocessors, so that one rank's waiting kernel never starves the peer it waits for.
int bind_device();
// Work done once per GPU, the first time a rank thread binds it, before bind_device() returns:
// the cuda kernels register their up-front load here (Note [ranks sharing a GPU] in heap.cpp).
// Called from the module's static initializers; runs in registration order.
using DeviceInit = void (*)();
void add_device_init(DeviceInit init);

class DeviceHeap {
 public:
  // Collective over `group`; zeroed memory.
  static std::shared_ptr<DeviceHeap> allocate(std::shared_ptr<Group> group, size_t bytes,
                                              std::string_view op = "cuda::DeviceHeap");
  ~DeviceHeap();
  const std::shared_ptr<Group>& group() const { return group_; }
  size_t bytes() const { return bytes_; }
  void* local() const;
  void* peer(int group_rank) const;
  int device() const;                    // this rank's GPU
  int device_of(int group_rank) const;   // a member's GPU

  struct Blocks;  // the members' allocations, owned jointly (src/runtime/cuda/heap.cpp)

 private:
  DeviceHeap() = default;
  std::shared_ptr<Group> group_;
  std::shared_ptr<Blocks> blocks_;
  size_t bytes_ = 0;
};

}  // namespace symmflow::cuda
