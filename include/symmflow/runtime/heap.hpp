// Symmetric heaps and symmetric tensors.
//
// A SymmetricHeap is one collective allocation in a group: the same number of bytes on every
// member, with every member's address. Creating one is a validated rendezvous: every member
// presents (allocation sequence number, bytes, group); when anything differs, every member raises
// InvalidUsage naming what differed on which rank, and nothing is allocated. The compiler carves
// many buffers out of one heap at fixed offsets; eager code makes one heap per tensor with
// empty_symmetric. A tensor whose storage is a SymmetricStorage is "symmetric": its peers' copies
// are at the same offset in their blocks (peer_data).
#pragma once

#include <memory>
#include <string_view>

#include "symmflow/core/tensor.hpp"
#include "symmflow/runtime/group.hpp"

namespace symmflow {

class SymmetricHeap {
 public:
  // Collective over `group`. `op` names the caller in errors.
  static std::shared_ptr<SymmetricHeap> allocate(std::shared_ptr<Group> group, size_t bytes,
                                                 std::string_view op = "allocate_symmetric");

  const std::shared_ptr<Group>& group() const { return group_; }
  size_t bytes() const { return region_->bytes(); }
  uint64_t seq() const { return seq_; }
  void* local() const { return region_->local(); }
  // A member's block; null for a member on another host (Note [spanning groups] in group.hpp).
  void* peer(int group_rank) const {
    const int i = group_->region_index(group_rank);
    return i < 0 ? nullptr : region_->peer(i);
  }

 private:
  SymmetricHeap() = default;
  std::shared_ptr<Group> group_;
  std::shared_ptr<SharedRegion> region_;
  uint64_t seq_ = 0;
};

// Storage over a whole heap (kind symmetric). Tensors carved from it share it.
class SymmetricStorage : public Storage {
 public:
  explicit SymmetricStorage(std::shared_ptr<SymmetricHeap> heap);
  const std::shared_ptr<SymmetricHeap>& heap() const { return heap_; }
  std::string_view group_name() const override;

 private:
  std::shared_ptr<SymmetricHeap> heap_;
};

// A contiguous zeroed tensor in a new heap of `group` of the calling rank (collective).
Tensor empty_symmetric(const Shape& shape, DType dtype, std::string_view group);
// A tensor view of `heap` at `offset_bytes`.
Tensor symmetric_tensor(const std::shared_ptr<SymmetricHeap>& heap, size_t offset_bytes,
                        const Shape& shape, DType dtype);

// Note [empty symmetric arguments]: PyTorch keeps no storage for a tensor without elements (its
// data pointer is null), so an empty tensor made by symmflow.torch.empty reaches an op without
// its symmetric heap, and "not in symmetric memory" named the wrong cause. An op given an empty
// tensor where a symmetric one is needed, and not finding its heap, raises this instead (CPU and
// GPU): "argument 'input' of <op> (f32[0]) has no elements, and a tensor without elements carries
// no symmetric memory (PyTorch keeps no storage for it): a collective of 0 elements moves nothing;
// skip the call".
[[noreturn]] void refuse_empty_symmetric(std::string_view op, std::string_view arg,
                                         const Tensor& t);

// The heap a tensor lives in, checked for an op: throws InvalidUsage when the tensor is not
// symmetric ("argument 'input' of symm_mem::one_shot_all_reduce is not in symmetric memory; ...
// allocate it with symmflow::empty_symmetric(shape, dtype, group) ..."), when it was allocated in
// another group than `group`, or when that group was destroyed.
const SymmetricHeap& symmetric_heap_of(const TensorView& t, std::string_view op,
                                       std::string_view arg, const Group& group);
// Address of the same element in a peer's copy (t must be symmetric); null for a member on
// another host.
void* peer_data(const TensorView& t, int group_rank);

}  // namespace symmflow
