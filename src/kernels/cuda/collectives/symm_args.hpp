// Argument helpers of the cuda symm_mem kernels (symm_mem_ops.cpp, symm_mem_exchange.cpp,
// symm_mem_p2p.cpp): the op's group with the op named in the error, every member's address of a
// GPU symmetric tensor, and a contiguous stand-in for a strided output. Private to the backend.
#pragma once

#include <memory>
#include <string_view>

#include "symmflow/core/tensor.hpp"
#include "symmflow/runtime/cuda.hpp"
#include "symmflow/runtime/group.hpp"

namespace symmflow::cuda {

std::shared_ptr<Group> group_for(std::string_view op, std::string_view name);

// Member r's address of `t`, which lives in `heap` (heap_of checked it).
inline void* peer_ptr(const DeviceHeap& heap, const Tensor& t, int r) {
  return static_cast<char*>(heap.peer(r)) +
         (static_cast<const char*>(t.raw_data()) - static_cast<const char*>(heap.local()));
}

// `out` itself when contiguous, else a fresh contiguous tensor like it; finish() copies it back.
class DenseOut {
 public:
  explicit DenseOut(const Tensor& out);
  void* data() const { return dense_.raw_data(); }
  void finish();

 private:
  const Tensor& out_;
  Tensor dense_;
};

}  // namespace symmflow::cuda
