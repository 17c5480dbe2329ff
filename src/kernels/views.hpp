// The aten view kernels, the same on every backend: a view is new geometry over the same storage
// (aten_meta computes it), so no device memory is touched. Each backend's SYMMFLOW_LIBRARY_IMPL
// block calls register_view_kernels. reshape returns a view when one exists and otherwise a fresh
// contiguous copy made through the registry's clone on the tensor's backend. cat (+ out) copies each
// input into its slice of the destination through the registry's copy_; constant_pad_nd fills its
// result through full.out and copies self's window into it (Note [pad geometry]); slice_scatter
// copies self, then src over the slice. So they take every dtype that copy_ and full.out take on
// the backend, and allocate nothing.
#pragma once

#include "symmflow/ops/library.hpp"

namespace symmflow::kernels {

// view, _unsafe_view, reshape, slice.Tensor, split_with_sizes, split.Tensor, t, transpose.int,
// permute, expand, unsqueeze, squeeze.dims, cat, cat.out, constant_pad_nd, slice_scatter.
void register_view_kernels(Library& m);

}  // namespace symmflow::kernels
