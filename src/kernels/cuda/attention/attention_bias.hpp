// Launchers of attention_bias.cu (Note [cudnn masks] in cudnn_attention.cpp), callable without
// CUDA headers; they return the cudaError_t of the launch. Private to the cuda backend.
#pragma once

#include <cstdint>

#include "kernels/cuda/attention/attention.hpp"

namespace symmflow::cuda {

// bias (contiguous [mb, mh, l, s_pad] of type `type`, bf16 or f16) = the mask read through its
// [batch, heads, l, s] broadcast strides (batch and head indices below mb and mh): a bool mask
// gives 0 where kept and -inf where dropped, a floating one its value; columns s..s_pad-1 -inf.
int launch_mask_to_bias(const AttentionMask& mask, void* bias, PwType type, int64_t mb,
                        int64_t mh, int64_t l, int64_t s, int64_t s_pad, void* stream);

// For each of `rows` rows whose statistic (log-sum-exp) is not finite, every key of it masked:
// o's row (contiguous rows of dv, type bf16 or f16) becomes zeros, PyTorch's result; with
// for_backward the statistic becomes +inf, so that the backward's probabilities of the row are
// zeros instead of NaN.
int launch_fix_masked_rows(float* stats, void* o, PwType type, int64_t rows, int64_t dv,
                           bool for_backward, void* stream);

}  // namespace symmflow::cuda
