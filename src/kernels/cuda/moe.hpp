// Launchers of the GPU kernels of moe.cu, for the MoE routing ops (aten_moe.cpp). Plain structs,
// no CUDA types; each launcher returns the cudaError_t of its launch as an int. Private to the
// cuda backend. Nothing here reads device memory on the host or allocates: every launch can be
// captured into a CUDA graph.
#pragma once

#include <cstdint>

#include "kernels/cuda/pointwise/pointwise.hpp"

namespace symmflow::cuda {

// Lines of `n` elements (line l starts at (l / inner) * n * inner + l % inner, step inner), in the
// order of Note [sort order] (ops/aten/meta_moe.hpp).
//  - launch_sort_lines_small: n <= kSortSharedMax; one block per line sorts (key, index) pairs in
//    shared memory, then writes the first k of each line from x into values/indices, laid out
//    [outer, k, inner].
//  - launch_sort_lines_global: any n, in place on values (x's elements, [outer, n, inner]) and
//    indices (i64, filled by the launcher with 0..n-1): a bitonic network whose comparators all put
//    the earlier element first, one launch per step, so the padding up to a power of two never
//    moves and is skipped.
constexpr int64_t kSortSharedMax = 2048;
struct SortLines {
  const void* x = nullptr;  // contiguous [outer, n, inner]
  void* values = nullptr;
  int64_t* indices = nullptr;
  PwType type = PwType::f32;
  int elem_size = 4;
  int64_t lines = 0, n = 0, inner = 1, k = 0;
  bool descending = false;
};
int launch_sort_lines_small(const SortLines& s, void* stream);
int launch_sort_lines_global(const SortLines& s, void* stream);  // x unused: values hold the data

// histc over a contiguous float tensor x (f32, f64, bf16, f16) into `bins` counts of its type, in
// one block: with from_data, the range is x's min and max found on the device (widened by 1 when
// empty; a range that is not finite, NaN in x, gives zero counts: the CPU raises). Binning as the
// CPU kernel does (each step rounded to x's type), counts in 32-bit shared-memory counters.
struct HistcArgs {
  const void* x = nullptr;
  void* out = nullptr;
  PwType type = PwType::f32;
  int64_t numel = 0, bins = 0;
  double lo = 0, hi = 0;
  bool from_data = false;
};
int launch_histc(const HistcArgs& a, void* stream);

// _grouped_mm: out [S, N] (contiguous, type of a) row r = a[r] @ b[g] where g is the first group
// with offs[g] > r, zero when there is none; offs (i32 or i64) read on the device, unchecked. One
// thread per output element, f32 accumulation (a simple kernel, not a tuned GEMM).
struct GroupedMmArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* offs = nullptr;
  void* out = nullptr;
  PwType type = PwType::f32;
  bool offs_i64 = false;
  int64_t rows = 0, k = 0, n = 0, groups = 0;
  int64_t a_strides[2] = {}, b_strides[3] = {};
};
int launch_grouped_mm(const GroupedMmArgs& a, void* stream);

}  // namespace symmflow::cuda
