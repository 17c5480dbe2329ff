// Argument resolution and validation shared by the cpu collective kernels.
//
// Contract: every helper throws InvalidUsage naming the op (and argument) before any
// communication, so a bad call never leaves peers waiting on half a collective. Nothing here
// allocates on the success path except OutBuffer for a strided output, the debug fingerprint
// and call_group / call_reduction on a launch record's first call (the state they keep).
//   - resolve_group: the group by name, "unknown group" prefixed with the op; call_group /
//     call_reduction: the same for a kernel call, kept in its launch record (Note [prepared
//     collectives]).
//   - parse_reduce_op / reduce_fn_checked: the reduce op and the typed loop for a dtype, or the
//     errors "unknown reduce_op" (listing the valid ones) / "dtype i8 is not supported on cpu".
//   - SymmArg: a symm arg checked with symmetric_heap_of (not symmetric / wrong group / destroyed
//     group) and for contiguity; local() and peer(r) give the data of each rank's copy.
//   - OutBuffer: a contiguous destination for an output of any layout (a temp, copied back by
//     finish(), when the output is strided).
//   - fingerprint: with tunables().debug_collectives, an all-gather of (op, dtype, numel, detail)
//     that raises on every rank, listing each rank's call, when the ranks disagree
//     (FAILURE_MODES rows 2 and 8).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kernels/cpu/collectives/reduce.hpp"
#include "symmflow/core/tensor.hpp"
#include "symmflow/ops/registry.hpp"
#include "symmflow/runtime/group.hpp"
#include "symmflow/runtime/heap.hpp"

namespace symmflow::cpu {

// Barrier channel of every collective (Note [signal protocol] in group.hpp: barriers and signals
// use separate flags, and all ranks issue collectives in one order, so one channel suffices).
inline constexpr int kCollectiveChannel = 0;

Group& resolve_group(std::string_view op, std::string_view name);
ReduceOp parse_reduce_op(std::string_view op, std::string_view name);
ReduceFn reduce_fn_checked(std::string_view op, DType dtype, ReduceOp reduce_op);

struct Reduction {
  Group* group;
  ReduceOp op;
  ReduceFn fn;
};

// The group, the reduce op and the typed loop for a dtype, or InvalidUsage naming `op`.
Reduction prepare(std::string_view op, std::string_view reduce_op, std::string_view group_name,
                  DType dtype);

// Note [prepared collectives]: a collective's group and reduce op are string literals of its
// call, the same on every run of a plan's step, so a plan's launch record (KernelCall::state,
// Note [launch records] in exec/executable.cpp) keeps them resolved by its first call: the group
// itself (held, instead of looked up by name through the thread's runtime on every run) and the
// reduce op with its typed loop for the dtype it was made for (another dtype resolves again). An
// eager call has no record and resolves per call. Either way a bad name raises before any
// communication, naming the op; a group destroyed after the record was made raises on its next
// use (check_alive), as a lookup by name would have.
Group& call_group(const KernelCall& c, std::string_view op, size_t group_arg);
Reduction call_reduction(const KernelCall& c, std::string_view op, size_t reduce_arg,
                         size_t group_arg, DType dtype);

class SymmArg {
 public:
  SymmArg(const Tensor& t, std::string_view op, std::string_view arg, const Group& group);
  const Tensor& tensor() const { return *tensor_; }
  void* local() const { return view_.data; }
  void* peer(int group_rank) const { return peer_data(view_, group_rank); }

 private:
  const Tensor* tensor_;
  TensorView view_;  // data and storage only: no shape copies on the hot path
};

// Every rank's address of one symmetric argument, in rank order. On the stack for groups up to
// 16 ranks (no allocation on the hot path).
class RankPointers {
 public:
  RankPointers(const SymmArg& a, int world)
      : RankPointers(world, [&](int r) { return a.peer(r); }) {}
  // Every rank's address of something else: peer(r) for r in 0..world-1.
  template <typename F>
  RankPointers(int world, F&& peer) : world_(world) {
    if (world > kSmall) {
      large_base_.resize(size_t(world));
      large_cur_.resize(size_t(world));
    }
    const char** base = world > kSmall ? large_base_.data() : base_.data();
    for (int r = 0; r < world; ++r) base[r] = static_cast<const char*>(peer(r));
  }
  // Every rank's address offset by `byte_offset` (valid until the next call).
  const void* const* at(int64_t byte_offset) {
    const char* const* base = world_ > kSmall ? large_base_.data() : base_.data();
    const void** cur = world_ > kSmall ? large_cur_.data() : cur_.data();
    for (int r = 0; r < world_; ++r) cur[r] = base[r] + byte_offset;
    return cur;
  }
  const char* rank(int r) const {
    return world_ > kSmall ? large_base_[size_t(r)] : base_[size_t(r)];
  }

 private:
  static constexpr int kSmall = 16;
  int world_;
  std::array<const char*, kSmall> base_{};
  std::array<const void*, kSmall> cur_{};
  std::vector<const char*> large_base_;
  std::vector<const void*> large_cur_;
};

// Throws unless `t` has `dtype` and `shape`; `like` says where the expectation comes from.
void check_spec(std::string_view op, std::string_view arg, const Tensor& t, DType dtype,
                const Shape& shape, std::string_view like);
// Throws when [a, a + a_bytes) and [b, b + b_bytes) overlap.
void check_no_overlap(std::string_view op, std::string_view a_name, const Tensor& a,
                      std::string_view b_name, const Tensor& b);

// A reduce-scatter of `input` over w ranks along dim 0 (the last dim when split_last_dim): rank r
// reduces `outer` rows of `chunk` elements, row o starting at element o * row_stride + r * chunk.
// Checks the input's rank and divisibility, the output's spec and that they do not overlap.
struct ScatterGeometry {
  int64_t outer = 1, chunk = 0, row_stride = 0;
};
ScatterGeometry check_reduce_scatter(std::string_view op, const Tensor& input,
                                     std::string_view input_name, int w, bool split_last_dim,
                                     const Tensor& output, std::string_view output_name);
// An all-gather: `out` must be `input` gathered from w ranks along dim 0, apart from it.
void check_all_gather(std::string_view op, const Tensor& input, std::string_view input_name, int w,
                      const Tensor& out);

// all_to_all_vdev's shapes: i64 in_splits [w] and out_splits_offsets [2, w], `out` with the dtype
// and row shape of `input` and apart from it. Returns the bytes of one row.
int64_t check_all_to_all(std::string_view op, const Tensor& input, const Tensor& out,
                         const Tensor& in_splits, const Tensor& out_splits_offsets, int w);

// all_to_all's shapes (Note [equal all-to-all]): `input` has a dim 0 divisible by w and `out` is
// like it and apart from it. Returns the bytes of one block (size(0) / w rows).
int64_t check_equal_all_to_all(std::string_view op, const Tensor& input, int w, const Tensor& out);

class OutBuffer {
 public:
  explicit OutBuffer(const Tensor& out);
  void* data() const { return data_; }
  void finish();  // copies the temp into a strided output

 private:
  const Tensor* out_;
  Tensor temp_;
  void* data_;
};

// Copies a contiguous buffer holding t.numel() elements into `t` (any layout), and back.
void copy_into(const Tensor& t, const void* src);
void copy_from(void* dst, const Tensor& t);

void fingerprint(Group& group, std::string_view op, DType dtype, int64_t numel,
                 std::string_view detail = {});

// InvalidUsage for an op that needs NVLink multicast.
[[noreturn]] void refuse_multicast(std::string_view op, std::string_view instead);

}  // namespace symmflow::cpu
