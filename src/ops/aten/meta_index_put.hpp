// Meta function of aten::index_put (PyTorch's `self[indices] = values`, functional: the result is
// a copy of self with the indexed elements replaced, or increased when `accumulate`). Two forms,
// both with a data-independent result shape (self's):
//  - integer index tensors (i32/i64, a `Tensor?[]` as index.Tensor takes, Note [gather
//    geometry]): values broadcast to the shape index.Tensor would give;
//  - one bool mask over self's leading dims (`x[mask] = v`, as DTensor's vocabulary-parallel
//    embedding writes its zeros): values broadcast to self's remaining dims (a leading 1 allowed);
//    one value per masked element is refused, its count depending on the mask's values.
// values has self's dtype, or is 0-dim (converted, as PyTorch does). Shared by the shape function
// and the kernels of every backend.
#pragma once

#include <string_view>

#include "ops/aten/meta.hpp"

namespace symmflow::aten_meta {

struct IndexPutGeometry {
  TensorSpec spec;        // self's dtype and shape
  bool mask = false;      // the bool-mask form
  int64_t mask_dims = 0;  // mask: how many leading dims of self it covers
  Shape values_shape;     // what values broadcast to (the indexed elements' shape)
  Shape values_view;      // values' shape with the leading 1 of a mask form's values dropped
};
IndexPutGeometry index_put_geometry(std::string_view op, const Tensor& self, const Value& indices,
                                    const Tensor& values);

}  // namespace symmflow::aten_meta
