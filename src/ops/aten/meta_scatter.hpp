// Meta functions of the ops that AOT autograd's training graphs add (transformers' loss and the
// backward of a decoder), shared by the shape functions and the kernels of every backend:
//  - squeeze.dims: a view of self without the listed dims of size 1;
//  - constant_pad_nd: self padded (or, with negative pads, cropped) per dim, the new elements
//    `value` (Note [pad geometry]);
//  - scatter.value: a copy of self with value written at the elements that an index names along
//    dim (Note [scatter geometry]);
//  - slice_scatter: a copy of self with src written over the slice self[start:end:step] along dim.
// Checks and error texts follow PyTorch's (torch/_refs, ATen's ScatterGatherChecks.h).
#pragma once

#include <string_view>
#include <vector>

#include "ops/aten/meta.hpp"

namespace symmflow::aten_meta {

// squeeze.dims(self, dim): the dims of `dim` (wrapped; each at most once) that have size 1 are
// dropped, the others kept with their strides; a 0-dim self stays as it is.
ViewGeometry squeeze_dims_geometry(std::string_view op, const Tensor& self, const Value& dims);

// Note [pad geometry]: constant_pad_nd's `pad` lists (before, after) pairs from the last dim
// backwards. The result is filled with `value`, then the part of self that survives the negative
// pads (self_view, a view of self) is copied to the same-shaped window of the result that starts
// at index `out_start` (pad_window). Every backend runs it so (kernels/views.cpp).
struct PadGeometry {
  TensorSpec spec;
  Shape window;      // the shape of what self contributes
  Tensor self_view;  // self cropped by the negative pads, of shape `window`
  Shape out_start;   // per dim, where the window starts in the result
};
PadGeometry pad_geometry(std::string_view op, const Tensor& self, const Value& pad);
// The window of `out` (the result, any strides) that self_view is copied to.
Tensor pad_window(const PadGeometry& g, const Tensor& out);

// Note [scatter geometry]: scatter writes out[i with i[dim] = index[i]] for every i over index's
// shape, out being a fresh copy of self: Note [gather geometry] over `out` (its `self` is the
// result seen over index's shape, stride 0 along dim; its one index is `index`), so the kernels
// that gather read through it write through it. index is i32 or i64 (as PyTorch now takes) with
// self's rank (a 0-dim one counts as one dim of size 1), no larger than self apart from dim; PyTorch does not wrap negative index
// values in scatter, so a value outside [0, size) is an error on the CPU ("index -1 is out of
// bounds for dimension 0 with size 3"); an empty index writes nothing and is not checked.
struct ScatterGeometry {
  TensorSpec spec;       // self's dtype and shape
  bool empty = false;    // index has no element
  GatherGeometry gather;  // over out, its spec of index's shape (when !empty)
};
// The checks, against `self`'s shape; the geometry over `out`, a tensor of self's shape (a meta
// tensor in shape functions).
ScatterGeometry scatter_geometry(std::string_view op, const Tensor& self, const Value& dim,
                                 const Tensor& index, const Tensor& out);
// The element of an index, checked as PyTorch's scatter checks it (no wrapping).
int64_t checked_scatter_index(std::string_view op, int64_t v, const GatherIndex& g);

// slice_scatter(self, src, dim, start, end, step): the slice of `out` (of self's shape) that src
// replaces; src must have exactly its shape (any dtype: it is copied, converting).
ViewGeometry slice_scatter_geometry(std::string_view op, const Tensor& self, const Tensor& src,
                                    const Value& dim, const Value& start, const Value& end,
                                    const Value& step);

}  // namespace symmflow::aten_meta
