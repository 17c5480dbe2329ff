// What a collective of its own file needs from the cuda backend (Note [one file per collective]):
// the workspace of the group's communicator for a call, the launch-shape helpers the built-in
// collectives use, and the dtype and reduce-op mapping with errors naming the op. Host code,
// includable from a .cu (the .cu files are C++20). Private to the cuda backend.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "kernels/cuda/collectives/call_signature.hpp"
#include "kernels/cuda/collectives/collectives.hpp"
#include "symmflow/core/dtype.hpp"
#include "symmflow/kernels/cuda.hpp"

namespace symmflow::cuda {

// Note [one file per collective]
// A collective with a CUDA kernel lives in one .cu of src/kernels/cuda: its device code (the
// protocol helpers of device_sync.cuh over the communicator's workspace), its launch, its `impl`
// through SYMMFLOW_LIBRARY_IMPL, and its preload (register_kernel_preload of collectives.hpp).
// Nothing else in the backend names it: no launcher declared in a header, no Communicator method,
// no list of kernels to preload. reduce_to_root.cu and fused_all_reduce_rms_norm.cu are the
// models. The collectives of all_reduce.cu and exchange.cu stay behind Communicator's methods
// because the executor and other kernels (eager copies, broadcast, the bench) call them directly.

// The workspace of one call of `op` on `comm`: raises if the communicator failed earlier; a
// failure the kernel records in the view's status is raised by synchronize() naming `op`.
struct CallWorkspace {
  WorkspaceView view{};
  int sms = 1;             // multiprocessors this rank's collectives may occupy
  size_t max_bytes = 0;    // bytes of one call that staging holds per source
};
// `fields` give the call's signature, which the kernel's first barrier compares across ranks
// (Note [gpu collective agreement] in call_signature.hpp).
struct WorkspaceAccess {
  static CallWorkspace call(Communicator& comm, std::string_view op, const CallFields& fields);
};
inline CallWorkspace call_workspace(Communicator& comm, std::string_view op,
                                    const CallFields& fields) {
  return WorkspaceAccess::call(comm, op, fields);
}

// f32, bf16, f16; anything else raises naming op, dtype and the backend.
ElemType elem_type(DType d, std::string_view op);
// sum, avg, max, min; anything else raises naming the op.
ReduceKind reduce_kind(std::string_view name, std::string_view op);
// Blocks for `units` units of work per rank: enough threads for every unit up to `per_thread`
// units each, at most `limit` blocks (every block of every rank is resident at once, so blocks
// waiting for their peers never starve the blocks they wait for).
int blocks_for(int64_t units, int threads, int per_thread, int limit);
// The widest load/store (16, 8, 4, 2 or 1 bytes) that divides every size and address given.
int unit_of(std::initializer_list<uintptr_t> values);

}  // namespace symmflow::cuda
