// Launcher of the rotary embedding kernel of rotary.cu (fused::rotary_embedding), callable
// without CUDA headers; returns the cudaError_t of the launch. Private to the cuda backend.
#pragma once

#include <cstdint>

#include "kernels/cuda/pointwise/pointwise.hpp"

namespace symmflow::cuda {

// out = x * cos + rotate_half(x) * sin over the last dim (size shape[nd - 1], even), every
// operand indexed over `shape` by its element strides (cos and sin: 0 on broadcast dims); all of
// type t (a float type); each product and the sum rounded to t (Note [fused compute ops]).
struct RotaryArgs {
  const void* x = nullptr;
  const void* cos = nullptr;
  const void* sin = nullptr;
  void* out = nullptr;
  int64_t shape[kPwMaxDims] = {};
  int64_t x_strides[kPwMaxDims] = {}, cos_strides[kPwMaxDims] = {}, sin_strides[kPwMaxDims] = {},
          out_strides[kPwMaxDims] = {};
  int nd = 0;
  int64_t numel = 0;
  PwType type = PwType::f32;
};
int launch_rotary(const RotaryArgs& args, void* stream);

}  // namespace symmflow::cuda
