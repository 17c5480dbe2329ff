// Symmetric heaps: validated rendezvous, symmetric storages and tensors, peer addressing.
// Contract: allocate() first exchanges (seq, bytes, group) among the members; if any member
// differs, every member raises the same InvalidUsage listing each rank's request, before any
// memory is allocated. Only then is the shared region allocated.
#include "symmflow/runtime/heap.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "runtime/rendezvous.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow {

namespace {

struct Request {
  uint64_t seq = 0;
  uint64_t bytes = 0;
};

std::string describe(const std::vector<std::string>& all, const Group& g) {
  std::string out;
  for (size_t r = 0; r < all.size(); ++r) {
    Request q;
    std::memcpy(&q, all[r].data(), sizeof q);
    out += fmt::format("\n  rank {}: allocation #{} of {} bytes", g.global_rank(int(r)), q.seq,
                       q.bytes);
  }
  return out;
}

}  // namespace

uint64_t validate_symmetric_request(Group& group, size_t bytes, std::string_view op) {
  group.check_alive(op);
  Request mine{group.next_allocation_seq(), bytes};
  std::string blob(sizeof mine, '\0');
  std::memcpy(blob.data(), &mine, sizeof mine);
  std::vector<std::string> all = group.allgather(blob, op);
  bool same = true;
  for (const std::string& b : all) same = same && b == all[0];
  SF_CHECK(same,
           "{}: symmetric allocation in group '{}' differs across ranks (every rank must allocate "
           "the same sizes in the same order):{}",
           op, group.name(), describe(all, group));
  return mine.seq;
}

std::shared_ptr<SymmetricHeap> SymmetricHeap::allocate(std::shared_ptr<Group> group, size_t bytes,
                                                       std::string_view op) {
  uint64_t seq = validate_symmetric_request(*group, bytes, op);
  auto heap = std::shared_ptr<SymmetricHeap>(new SymmetricHeap());
  heap->seq_ = seq;
  // Note [spanning groups]: the members of this host only, when the group spans hosts.
  heap->region_ = group->bootstrap().allocate_shared(
      group->region_members(), fmt::format("heap:{}:{}", group->name(), seq),
      std::max<size_t>(bytes, 64), op);
  heap->group_ = std::move(group);
  return heap;
}

SymmetricStorage::SymmetricStorage(std::shared_ptr<SymmetricHeap> heap)
    : Storage(heap->local(), heap->bytes(), Device::cpu(), MemoryKind::symmetric),
      heap_(std::move(heap)) {}

std::string_view SymmetricStorage::group_name() const { return heap_->group()->name(); }

Tensor symmetric_tensor(const std::shared_ptr<SymmetricHeap>& heap, size_t offset_bytes,
                        const Shape& shape, DType dtype) {
  const size_t bytes = checked_nbytes(shape, dtype, "symmetric_tensor");
  SF_CHECK(offset_bytes <= heap->bytes() && bytes <= heap->bytes() - offset_bytes,
           "symmetric tensor {}{} at offset {} does not fit a heap of {} bytes", dtype_name(dtype),
           shape_str(shape), offset_bytes, heap->bytes());
  return Tensor::from_storage(std::make_shared<SymmetricStorage>(heap), offset_bytes, dtype, shape);
}

Tensor empty_symmetric(const Shape& shape, DType dtype, std::string_view group) {
  const size_t bytes = checked_nbytes(shape, dtype, "empty_symmetric");  // Note [checked sizes]
  const std::shared_ptr<Group>& g = Runtime::current().group(group);
  auto heap = SymmetricHeap::allocate(g, bytes, "empty_symmetric");
  return symmetric_tensor(heap, 0, shape, dtype);
}

void refuse_empty_symmetric(std::string_view op, std::string_view arg, const Tensor& t) {
  invalid_usage("argument '{}' of {} ({}) has no elements, and a tensor without elements carries "
                "no symmetric memory (PyTorch keeps no storage for it): a collective of 0 "
                "elements moves nothing; skip the call (Note [empty symmetric arguments])",
                arg, op, t.str());
}

const SymmetricHeap& symmetric_heap_of(const TensorView& t, std::string_view op,
                                       std::string_view arg, const Group& group) {
  const auto* s = dynamic_cast<const SymmetricStorage*>(t.storage);
  SF_CHECK(s,
           "{}: argument '{}' is not in symmetric memory; allocate it with "
           "symmflow::empty_symmetric(shape, dtype, \"{}\") or let the compiler place it",
           op, arg, group.name());
  const SymmetricHeap& heap = *s->heap();
  heap.group()->check_alive(op);
  SF_CHECK(heap.group().get() == &group,
           "{}: argument '{}' was allocated in group '{}' but the op runs on group '{}'", op, arg,
           heap.group()->name(), group.name());
  return heap;
}

void* peer_data(const TensorView& t, int group_rank) {
  const auto* s = dynamic_cast<const SymmetricStorage*>(t.storage);
  SF_ASSERT(s);
  ptrdiff_t offset = static_cast<char*>(t.data) - static_cast<char*>(s->heap()->local());
  void* base = s->heap()->peer(group_rank);
  return base ? static_cast<char*>(base) + offset : nullptr;
}

}  // namespace symmflow
