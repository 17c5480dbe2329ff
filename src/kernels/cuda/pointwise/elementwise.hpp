// Launchers of the generic GPU kernels of elementwise.cu, for the aten mask, comparison, bitwise,
// indexing and scan ops (aten_logic.cpp). Plain structs, no CUDA types; each launcher returns the
// cudaError_t of its launch as an int. Private to the cuda backend.
//
// Note [elementwise compute types]: an elementwise op reads every input converted to one compute
// type: int64 when `compute` is an integer type or bool, else double with each value first rounded
// to `compute` (f32, bf16, f16; f64 as is). So comparisons run exactly in PyTorch's promoted type,
// and bitwise ops see exact 64-bit integers. The result is stored converted to the output's type
// (to bool: != 0; double to an integer type: truncated, as the CPU's conversion).
#pragma once

#include <cstdint>

#include "kernels/cuda/pointwise/pointwise.hpp"

namespace symmflow::cuda {

constexpr int kElemMaxInputs = 3;
constexpr int kGatherMaxIndices = kPwMaxDims;

enum class ElemOp : uint8_t {
  eq, ne, lt, le, gt, ge,                 // bool results of in[0] <op> in[1]
  bit_and, bit_or, bit_xor, bit_not,      // integer compute; bit_not of a bool output is logical
  logical_and, logical_or, logical_not,   // != 0 tests (NaN is true)
  where,                                  // in[0] != 0 ? in[1] : in[2]
  fill,                                   // i0 (integer compute) or c0
  arange,                                 // c0 + i * c1, in double, i the element's linear index
  div_true, div_trunc, div_floor,         // in[0] / in[1] (Note [div rounding modes])
  int_add, int_sub, int_mul,              // integer compute: in[0] + i1 * in[1], -, in[0] * in[1]
  clamp,                                  // in[0] within [i0 or c0, i1 or c1] (has_min, has_max)
};

// Note [div rounding modes]: div.Tensor_mode / div.Scalar_mode as PyTorch computes them: floats in
// double for an f64 compute type, else in float (bf16 and f16 values exactly; with
// `scalar_in_float` a Scalar divisor is rounded to float rather than to `compute`, PyTorch's
// reduced-float path), 'floor' by c10::div_floor_floating, 'trunc' as trunc(a / b); integers in
// int64 with C truncation and the floor correction, INT_MIN / -1 wrapping, and a zero divisor
// giving 0 (unchecked on the GPU; the CPU raises ZeroDivisionError).

struct ElemOperand {
  const void* data = nullptr;  // null: the constant i0 / c0 (a Scalar operand)
  int64_t strides[kPwMaxDims] = {};  // elements, over the output's shape (0 where broadcast)
  PwType type = PwType::f32;
};

struct ElemArgs {
  void* out = nullptr;
  int64_t out_strides[kPwMaxDims] = {};
  PwType out_type = PwType::f32;
  ElemOperand in[kElemMaxInputs];
  int64_t sizes[kPwMaxDims] = {};  // the output's shape
  int ndim = 0;
  int64_t numel = 0;
  PwType compute = PwType::f64;  // Note [elementwise compute types]
  double c0 = 0, c1 = 0;
  bool scalar_in_float = false;  // Note [div rounding modes]
  int64_t i0 = 0;
  int64_t i1 = 1;  // int_add / int_sub: alpha
  // clamp: which bounds apply (min in i0 / c0, max in i1 / c1, rounded to `compute`); a NaN input
  // or bound gives NaN, as PyTorch's clamp.
  bool has_min = false, has_max = false;
};
int launch_elementwise(ElemOp op, const ElemArgs& a, void* stream);

// out[o] = any element of in over the reduced dims is != 0 (NaN counts), for the contiguous bool
// out of out_numel elements laid over the kept dims.
struct AnyArgs {
  const void* in = nullptr;
  PwType in_type = PwType::f32;
  bool* out = nullptr;
  int64_t out_numel = 0;
  int n_kept = 0, n_reduced = 0;
  int64_t kept_sizes[kPwMaxDims] = {}, kept_strides[kPwMaxDims] = {};
  int64_t reduced_sizes[kPwMaxDims] = {}, reduced_strides[kPwMaxDims] = {};
  int64_t count = 1;  // elements reduced into each output
};
int launch_any(const AnyArgs& a, void* stream);

// Note [gather geometry] (ops/aten/meta.hpp): out[i] = self[self_off(i) + sum_k idx_k(i) * stride_k]
// with a contiguous out of `sizes`, elements copied by their byte size. An index value out of
// [-dim_size, dim_size) is not checked on the GPU: its element is written as zero bytes.
// With `values` set it scatters instead (index_put): self[self_off(i) + ...] = values[values_off(i)]
// (values_strides 0 where broadcast), an element at an index out of range is not written, and of
// repeated indices one value lands, which one unspecified (as PyTorch's GPUs do). With
// `accumulate` too (index_put accumulate=True), self[...] += values[...] by atomicAdd in `type`
// (f32, f64, bf16, f16, i32, i64, u32; the caller refuses others), so repeated indices sum (floats
// in an unspecified order, as on PyTorch's GPUs; integers exactly, wrapping).
struct GatherArgs {
  void* out = nullptr;
  const void* self = nullptr;
  int elem_size = 4;
  int64_t sizes[kPwMaxDims] = {};
  int ndim = 0;
  int64_t numel = 0;
  int64_t self_strides[kPwMaxDims] = {};
  int n_indices = 0;
  const void* index[kGatherMaxIndices] = {};
  bool index_i64[kGatherMaxIndices] = {};
  int64_t index_strides[kGatherMaxIndices][kPwMaxDims] = {};
  int64_t dim_size[kGatherMaxIndices] = {}, dim_stride[kGatherMaxIndices] = {};
  const void* values = nullptr;  // set: scatter into self (out unused)
  int64_t values_strides[kPwMaxDims] = {};
  bool accumulate = false;
  PwType type = PwType::f32;  // self's and values' element type, for `accumulate`
};
int launch_gather(const GatherArgs& a, void* stream);

// y = cumsum of x along the middle dim of a contiguous [outer, n, inner] block; x (any type) is
// converted to y's type element by element first; double accumulation for floating y, int64 for
// integer and bool y.
int launch_cumsum(const void* x, PwType xt, void* y, PwType yt, int64_t outer, int64_t n,
                  int64_t inner, void* stream);

}  // namespace symmflow::cuda
