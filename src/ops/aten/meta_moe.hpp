// Meta functions of the aten ops that mixture-of-experts routing emits under torch.compile
// (transformers' Mixtral, Qwen3-MoE): topk, sort (+ .stable), div with a rounding mode, histc,
// empty_permuted and _grouped_mm. Shared, like meta.hpp, by the shape functions (moe.cpp) and the
// kernels of every backend (kernels/cpu/moe.cpp, kernels/cuda/aten_moe.cpp), so that both agree on
// result types and refuse the same inputs with the same messages.
//
// Note [sort order]: sort and topk order the elements of a line by (key, index): keys ascending
// (sort, topk with largest=False) or descending (sort descending, topk largest), NaN greater than
// every number (last ascending, first descending, as PyTorch), -0.0 equal to 0.0, and equal keys
// (NaNs among them) in ascending index order. The order is total, so sort is stable (PyTorch's
// stable=True result) and topk's choice among equal values is the lowest indices, on every
// backend. PyTorch's CPU topk leaves that choice unspecified (a partial sort: topk([1, 3, 3, 2, 3],
// 3) gives indices [2, 4, 1] there, [1, 2, 4] here); its values agree. topk's `sorted=False` gives
// the sorted result (PyTorch promises no order then).
#pragma once

#include <cstdint>
#include <string_view>

#include "ops/aten/meta.hpp"

namespace symmflow::aten_meta {

// topk(self, k, dim, largest, sorted) and sort(self, dim, descending): values (self's dtype) and
// indices (i64), with self's shape and `k` elements along dim (sort: all of them). The lines run
// along dim of self seen as a contiguous [outer, n, inner] block; a 0-dim self is one line of one
// element (results 0-dim). topk refuses bool (PyTorch's CPU does) and k outside [0, n]
// ("selected index k out of range").
struct SortInfo {
  TensorSpec values, indices;
  int64_t dim = 0, outer = 1, n = 1, inner = 1;
  int64_t k = 1;
  bool descending = false;  // Note [sort order]
};
SortInfo topk_info(std::string_view op, const Tensor& self, const Value& k, const Value& dim,
                   const Value& largest);
SortInfo sort_info(std::string_view op, const Tensor& self, const Value& dim,
                   const Value& descending);

// div.Tensor_mode / div.Scalar_mode: rounding_mode None is true division (div.Tensor's result
// type: integers and bool give f32); 'trunc' and 'floor' keep PyTorch's result_type of the pair
// (integer floor division stays integer; bool refused). Anything else is refused with PyTorch's
// text.
enum class RoundingMode { none, trunc, floor };
struct DivModeInfo {
  TensorSpec spec;
  RoundingMode mode = RoundingMode::none;
};
DivModeInfo div_mode_info(std::string_view op, const Tensor& self, const Value& other,
                          const Value& rounding_mode);

// histc(self, bins, min, max): `bins` counts in self's dtype (a float dtype). When min == max the
// data's min and max are the range (`from_data`; PyTorch's rule, documented for min == max == 0);
// a range that is still empty widens to [min - 1, max + 1]. A range given by the caller is checked
// here (finite, min < max); one from the data by the kernel.
struct HistcInfo {
  TensorSpec spec;
  int64_t bins = 100;
  double min = 0, max = 0;
  bool from_data = false;
};
HistcInfo histc_info(std::string_view op, const Tensor& self, const Value& bins, const Value& min,
                     const Value& max);
// The range of a histc whose bounds are `lo` and `hi` after the data's min and max were taken
// (when from_data): widened when empty, then checked (PyTorch's texts, "torch.histc: ..." after the
// op name).
void histc_final_range(std::string_view op, double& lo, double& hi);

// empty_permuted(size, physical_layout, dtype, ...): a contiguous tensor of `size` (symmflow's
// results are contiguous, as empty.memory_format's are); physical_layout must be a permutation of
// the dims.
TensorSpec empty_permuted_spec(std::string_view op, const Value& size, const Value& layout,
                               const Value& dtype);

// _grouped_mm(self, mat2, offs, bias, out_dtype), the form transformers' MoE uses: self [S, K]
// with rows sorted by group, mat2 [G, K, N], offs [G] (i32 or i64) the cumulative row ends:
// out[offs[g-1]:offs[g]] = self[offs[g-1]:offs[g]] @ mat2[g] (offs[-1] = 0); rows at or past
// offs[G-1] are zero. f32, bf16 and f16 (PyTorch's), out_dtype None or self's dtype; bias and
// every other rank combination are refused.
struct GroupedMmInfo {
  TensorSpec spec;
  int64_t rows = 0, k = 0, n = 0, groups = 0;
};
GroupedMmInfo grouped_mm_info(std::string_view op, const Tensor& self, const Tensor& mat2,
                              const Value& offs, const Value& bias, const Value& out_dtype);
// The kernels' check of offs' values (host-readable ones): non-decreasing, in [0, S].
void check_grouped_mm_offsets(std::string_view op, const std::vector<int64_t>& ends, int64_t rows);

}  // namespace symmflow::aten_meta
