// NCCL, the network engine of GPU groups that span hosts (Note [nccl engine] in nccl.cpp): the
// library opened on first use, and each rank thread's NCCL communicator of a group, made from
// the group's own rendezvous. Calls are enqueued on the given stream and are capturable into a
// CUDA graph; every NCCL error raises, naming the op, the group and NCCL's words. Private to the
// cuda backend (spanning.cpp calls it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kernels/cuda/collectives/collectives.hpp"
#include "symmflow/core/dtype.hpp"
#include "symmflow/runtime/group.hpp"

namespace symmflow::cuda::nccl {

// "" when NCCL can be opened here, else why not (the paths tried and dlopen's words); opens it on
// the first call.
const std::string& unavailable();
// NCCL's version as NCCL writes it (22703 for 2.27.3); 0 when unavailable.
int version();

// One transfer of a grouped send/receive: `bytes` to or from group rank `peer`.
struct Transfer {
  const void* src = nullptr;  // sends
  void* dst = nullptr;        // receives
  size_t bytes = 0;
  int peer = 0;
};

class Comm {
 public:
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // n elements of `dtype` (f32, bf16, f16 for reductions; any dtype for the moves, as bytes).
  void all_reduce(const void* in, void* out, int64_t n, DType dtype, ReduceKind red,
                  std::string_view op, void* stream);
  void reduce(const void* in, void* out, int64_t n, DType dtype, ReduceKind red, int root,
              std::string_view op, void* stream);
  // in: size() * n elements; out: the n of this rank's chunk.
  void reduce_scatter(const void* in, void* out, int64_t n, DType dtype, ReduceKind red,
                      std::string_view op, void* stream);
  // out: every member's `bytes` in group order.
  void all_gather(const void* in, void* out, size_t bytes, std::string_view op, void* stream);
  void broadcast(void* buf, size_t bytes, int root, std::string_view op, void* stream);
  // The sends and receives as one NCCL group (all-to-all, collective_permute).
  void exchange(std::span<const Transfer> sends, std::span<const Transfer> receives,
                std::string_view op, void* stream);

  // Raises when this communicator was aborted (Note [bounded NCCL waits] in nccl.cpp).
  void check_usable(std::string_view op) const;
  // Ends its calls on the GPU for good (ncclCommAbort); `why` is named by later refusals.
  void abort(const std::string& why);

  struct Handle;

 private:
  friend void wait(void* stream, std::string_view op);
  friend Comm& comm(const std::shared_ptr<Group>& group, std::string_view op);
  friend Comm& cross(const std::shared_ptr<Group>& group, std::string_view op);
  Comm(std::shared_ptr<Group> group, std::unique_ptr<Handle> handle);
  void check(int result, std::string_view what, std::string_view op) const;
  std::shared_ptr<Group> group_;
  std::unique_ptr<Handle> handle_;
};

// Note [bounded NCCL waits]: waits for `stream` at most the world's timeout, polling, and raises
// (PeerFailure, Nccl or Timeout, naming the group) when NCCL reports an asynchronous error, the
// world learns that a peer failed, or the time runs out; every NCCL communicator of this rank
// thread is then aborted, which ends their calls on the GPU, and refuses further calls.
void wait(void* stream, std::string_view op);

// The calling rank thread's NCCL communicator of `group` (ranks in group order): made on first
// use, collectively (every member calls it in the same order, as with every collective), outside
// a CUDA graph capture; raises InvalidUsage naming `op` when NCCL cannot be opened.
Comm& comm(const std::shared_ptr<Group>& group, std::string_view op);
// The calling rank thread's NCCL communicator of the members of `group` with this rank's index in
// its host (Group::cross_ranks(), one a host, by host), split from comm(group) (ncclCommSplit:
// collective over the group); raises InvalidUsage when the NCCL loaded lacks ncclCommSplit.
Comm& cross(const std::shared_ptr<Group>& group, std::string_view op);
// Whether the NCCL loaded can split a communicator (2.18 and later).
bool can_split();

}  // namespace symmflow::cuda::nccl
