// Launchers of the row kernels of norm.cu (sum/mean, rms_norm, softmax), callable without CUDA headers;
// they return the cudaError_t of the launch. Private to the cuda backend.
#pragma once

#include <cstdint>

#include "kernels/cuda/pointwise/pointwise.hpp"

namespace symmflow::cuda {

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) (* w) for `rows` contiguous rows of n; x, y and
// w (n elements, or null) of the given types; f32 accumulation (f64 for f64 inputs).
int launch_rms_norm(const void* x, PwType xt, const void* w, PwType wt, void* y, PwType yt,
                    int64_t rows, int64_t n, double eps, void* stream);
// native_layer_norm over `rows` contiguous rows of n: mean[r] and rstd[r] (of type A: f32, or f64
// for f64 inputs) from two block-wide sums (mean, then the squared deviations), and
// y[r, :] = (x[r, :] - mean) * rstd (* w) (+ b); w and b of n elements, or null. A row of no
// element has mean 0 and rstd NaN (as the CPU kernel).
int launch_layer_norm(const void* x, PwType xt, const void* w, PwType wt, const void* b, PwType bt,
                      void* y, void* mean, void* rstd, int64_t rows, int64_t n, double eps,
                      void* stream);
// y[r] = sum (or mean) of x[r, :] for `rows` contiguous rows of n; f32 accumulation (f64 for f64
// inputs); a mean of no element is NaN. An integer y (i64, i32, i8, u32; x of any type, bool
// included) takes an exact sum in int64 (wrapping), never a mean.
int launch_row_sum(const void* x, PwType xt, void* y, PwType yt, int64_t rows, int64_t n,
                   bool mean, void* stream);
// y[o, c] = sum (or mean) of x[o, :, c] for a contiguous [outer, rows, cols] x (Note [column sums]
// in norm.cu), accumulated and typed as launch_row_sum's; `workspace` holds
// col_sum_workspace_bytes(outer, rows, cols, xt, yt) bytes on the GPU (null when that is 0).
int64_t col_sum_workspace_bytes(int64_t outer, int64_t rows, int64_t cols, PwType xt, PwType yt);
int launch_col_sum(const void* x, PwType xt, void* y, PwType yt, int64_t outer, int64_t rows,
                   int64_t cols, bool mean, void* workspace, void* stream);
// y[r] = max of x[r, :] (NaN if any element is NaN), for `rows` contiguous rows of n >= 1.
int launch_row_max(const void* x, PwType xt, void* y, PwType yt, int64_t rows, int64_t n,
                   void* stream);
// Softmax along the middle dim of a contiguous [outer, n, inner] block; log_softmax when `log_out`.
int launch_softmax(const void* x, PwType xt, void* y, PwType yt, int64_t outer, int64_t n,
                   int64_t inner, bool log_out, void* stream);

}  // namespace symmflow::cuda
