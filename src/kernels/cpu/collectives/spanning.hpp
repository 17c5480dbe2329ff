// Collectives of groups that span hosts (Note [spanning groups] in group.hpp), shared by the cpu
// collective kernels.
//
// Contract: a kernel whose group spans hosts replaces its first barrier by one exchange through
// the bootstrap of what every member holds (Exchanged: each member's bytes of its symmetric
// argument, agreeing on the call first), reads the peers' copies from it instead of their
// memory, and passes no second barrier (nothing of a peer's is read after the exchange returns).
// Results are those of the one-host kernel bit for bit: the same reductions in rank order. The
// all-reduce alone may go hierarchical for large sizes (span_all_reduce, Note [hierarchical
// all-reduce]).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/collectives/args.hpp"

namespace symmflow::cpu {

// Every member's `bytes` at `mine` (the caller's copy; bytes may differ per member, e.g. 0 off a
// broadcast's root), exchanged with agreement on `call` (Group::exchange).
class Exchanged {
 public:
  Exchanged(Group& g, const CollectiveCall& call, const void* mine, size_t bytes);
  Exchanged(Group& g, const CollectiveCall& call, const Tensor& mine);  // any layout
  const void* of(int group_rank) const { return data_[size_t(group_rank)].data(); }

 private:
  std::vector<std::string> data_;
};

// All-reduce of `numel` elements at `in` (this rank's copy) over a spanning group into `dst`
// (which may be `in`): flat (Exchanged, rank order) or hierarchical by size and shape (Note
// [hierarchical all-reduce]; the rule is kernels::hierarchical_all_reduce).
void span_all_reduce(const Reduction& red, const CollectiveCall& call, const SymmArg& in,
                     int64_t numel, void* dst);

}  // namespace symmflow::cpu
