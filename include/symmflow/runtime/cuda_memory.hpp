// Tensors on GPUs: device memory, the rank thread's stream and GPU symmetric tensors. The per-group
// communicators, host copies and the early-launch state are the kernels layer's
// (symmflow/kernels/cuda.hpp).
//
//   symmflow::run_threads(2, [](symmflow::Runtime& rt) {
//     symmflow::cuda::bind_device();   // GPU rank % count; registers the device allocator
//     Tensor x = cuda::empty_symmetric({16, 4096}, DType::bf16, "world");
//     Tensor r = call("symm_mem::one_shot_all_reduce", {x, "sum", "world"}).to_tensor();
//     Tensor h = cuda::to_host(r);     // kernels/cuda.hpp; waits for the rank's stream
//   });
//
// Every kernel of the cuda backend is enqueued on cuda::current_stream(), which bind_device()
// sets to a non-blocking stream of the rank thread; the executor switches it between its compute
// and communication streams. Host reads of device tensors go through to_host (or aten::copy_ into
// a host tensor followed by synchronize()). Nothing here allocates or rendezvouses while the
// current stream is being captured into a CUDA graph (such a call raises InvalidUsage), except a
// kernel's scratch inside a CaptureScratch scope (Note [scratch inside a capture]).
#pragma once

#include <atomic>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "symmflow/core/tensor.hpp"
#include "symmflow/runtime/cuda.hpp"

namespace symmflow::cuda {

// The calling thread's stream (cudaStream_t); bind_device() makes one per rank thread.
void* current_stream();
void set_current_stream(void* stream);
class StreamGuard {
 public:
  explicit StreamGuard(void* stream) : saved_(current_stream()) { set_current_stream(stream); }
  ~StreamGuard() { set_current_stream(saved_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  void* saved_;
};
// Waits for the current stream; raises Cuda on an asynchronous error.
void synchronize();
// Whether the current stream is being captured into a CUDA graph.
bool capturing();
// Raises InvalidUsage naming `what` when the current stream is being captured.
void check_not_capturing(std::string_view what);

// Note [scratch inside a capture]
// A kernel may need scratch memory: a contiguous copy of a strided input, a staging output, the
// pair a long sort works in. Inside a CUDA graph capture, cudaMallocAsync and cudaFreeAsync on
// the capturing stream become the graph's allocation and free nodes, so such scratch is legal
// there as long as it is freed before the capture ends: a graph whose allocation outlives it
// cannot be launched again until that memory is freed. The executor opens a CaptureScratch
// around the steps it captures; while one is open on the thread, allocate_device accepts a
// capturing stream and counts the allocation as live until its storage is destroyed, and the
// executor refuses a capture that ends with live scratch (a kernel that returned memory it
// allocated). Outside a scope, allocating while capturing still raises InvalidUsage: an eager
// op's fresh output inside a caller's capture would outlive it.
class CaptureScratch {
 public:
  CaptureScratch();
  ~CaptureScratch();
  CaptureScratch(const CaptureScratch&) = delete;
  CaptureScratch& operator=(const CaptureScratch&) = delete;
  // Allocations made inside this scope whose storage is still alive.
  long live() const;

 private:
  std::shared_ptr<std::atomic<long>> live_;
  std::shared_ptr<std::atomic<long>>* saved_;
};

// Regular device memory on GPU `device` (zero-filled when `zero`); the allocator that
// Storage::allocate uses for cuda devices.
std::shared_ptr<Storage> allocate_device(int device, size_t bytes, bool zero);

// Storage over a whole DeviceHeap (kind symmetric, on the heap's GPU).
class SymmetricDeviceStorage : public Storage {
 public:
  explicit SymmetricDeviceStorage(std::shared_ptr<DeviceHeap> heap);
  const std::shared_ptr<DeviceHeap>& heap() const { return heap_; }
  std::string_view group_name() const override;

 private:
  std::shared_ptr<DeviceHeap> heap_;
};

// A zeroed contiguous tensor in a new GPU symmetric heap of `group` (collective).
Tensor empty_symmetric(const Shape& shape, DType dtype, std::string_view group);
// The GPU heap a symm argument lives in, checked for an op: InvalidUsage when the tensor is not in
// GPU symmetric memory (naming op and argument and how to fix it), when it belongs to another
// group, or when it is not contiguous.
const DeviceHeap& heap_of(const Tensor& t, std::string_view op, std::string_view arg,
                          const Group& group);

}  // namespace symmflow::cuda
