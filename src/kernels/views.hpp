// The aten view kernels, the same on every backend: a view is new geometry over the same storage
// (aten_meta computes it), so no device memory is touched. Each backend's SYMMFLOW_LIBRARY_IMPL
// block calls register_view_kernels. reshape returns a view when one exists and otherwise a fresh
// contiguous copy made through the registry's clone on the tensor's backend. cat (+ out) copies each
// input into its slice of the destination through the registry's copy_.
#pragma once

#include "symmflow/ops/library.hpp"

namespace symmflow::kernels {

// view, _unsafe_view, reshape, slice.Tensor, split_with_sizes, split.Tensor, t, transpose.int,
// permute, expand, unsqueeze, cat, cat.out.
void register_view_kernels(Library& m);

}  // namespace symmflow::kernels
