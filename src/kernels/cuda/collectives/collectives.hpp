// Launchers of the cuda collective kernels of all_reduce.cu and exchange.cu, callable from host
// code without CUDA headers (Communicator calls them); they return the cudaError_t of the launch
// as an int (0: success). Those two .cu files include nothing of symmflow but this header and
// workspace_device.hpp. A collective of a file of its own declares nothing here (Note [one file
// per collective] in workspace_access.hpp). Private to the cuda backend.
#pragma once

#include <cstdint>

#include "runtime/cuda/workspace_device.hpp"

namespace symmflow::cuda {

enum class ReduceKind { sum, avg, max, min };
enum class ElemType { f32, bf16, f16 };

// Launch shape of one call: the same on every rank for the same call (a function of the size).
struct Launch {
  int blocks = 1;
  int threads = 512;
  bool vec = false;  // 16-byte loads and stores (sizes and addresses allow it)
  bool early = false;  // a programmatic dependent launch (Note [early launch]); all_reduce only
};

// Runs `load` (it returns a cudaError_t as int) on each GPU the first time a rank thread binds it,
// so the file's kernels load now rather than at their first launch: a lazy load may wait for a
// peer's kernel spinning on a shared GPU (Note [ranks sharing a GPU] in src/runtime/cuda/heap.cpp).
// Each .cu registers its own from a namespace-scope initializer (preload.cpp runs them):
//   const bool kPreloaded = register_kernel_preload(&load);
bool register_kernel_preload(int (*load)());

// out = reduce(in of every rank); see Note [cuda all-reduce] in all_reduce.cu.
int launch_one_shot(const WorkspaceView& v, const void* in, void* out, int64_t n, ElemType type,
                    ReduceKind op, const Launch& l, void* stream);
// The same with the data carrying its flag (n * size multiple of 8, in and out 8-byte aligned,
// at most kLLMaxBytes).
int launch_one_shot_ll(const WorkspaceView& v, const void* in, void* out, int64_t n, ElemType type,
                       ReduceKind op, const Launch& l, void* stream);
// v.data[r] reduced in place (n elements); see the same note.
int launch_two_shot(const WorkspaceView& v, int64_t n, ElemType type, ReduceKind op,
                    const Launch& l, void* stream);

// The other collectives (Note [cuda exchange] in exchange.cu): a barrier of the group, a body, a
// barrier. Pointers may be peers' (peer access); `unit` is the bytes moved per load/store (16, 8,
// 4, 2 or 1; every size and address a multiple of it).
struct Segment {
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t bytes = 0;
};
struct CopyPlan {
  Segment seg[kMaxRanks];
  int count = 0;  // 0: a barrier
};
int launch_exchange_copy(const WorkspaceView& v, const CopyPlan& plan, int unit, const Launch& l,
                         void* stream);
// out[o * chunk + i] = reduce over ranks p of src[p][o * row_stride + i] (elements).
struct ReduceScatterPlan {
  const void* src[kMaxRanks] = {};
  void* out = nullptr;
  int64_t outer = 0, chunk = 0, row_stride = 0;
};
int launch_reduce_scatter(const WorkspaceView& v, const ReduceScatterPlan& plan, ElemType type,
                          ReduceKind op, const Launch& l, void* stream);
// all_to_all_vdev: splits[p] and in[p] are rank p's in_splits and input; meta is this rank's
// out_splits_offsets ([2, world] i64).
struct AllToAllPlan {
  const int64_t* splits[kMaxRanks] = {};
  const void* in[kMaxRanks] = {};
  void* out = nullptr;
  int64_t* meta = nullptr;
  int64_t row_bytes = 0, in_rows = 0, out_rows = 0;
};
int launch_all_to_all(const WorkspaceView& v, const AllToAllPlan& plan, int unit, const Launch& l,
                      void* stream);
// Copies `bytes` from src into dst (the peer's memory), then raises the peer's signal.
int launch_put_signal(const WorkspaceView& v, const void* src, void* dst, int64_t bytes, int unit,
                      int peer, int channel, const Launch& l, void* stream);
int launch_wait_signal(const WorkspaceView& v, int peer, int channel, void* stream);
int launch_fill_u32(uint32_t* p, uint32_t value, int64_t count, void* stream);

}  // namespace symmflow::cuda
