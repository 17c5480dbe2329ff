// aten::index_put's meta function; see meta_index_put.hpp for the contract.
#include "ops/aten/meta_index_put.hpp"

#include <algorithm>

namespace symmflow::aten_meta {

IndexPutGeometry index_put_geometry(std::string_view op, const Tensor& self, const Value& indices,
                                    const Tensor& values) {
  IndexPutGeometry g;
  g.spec = {self.dtype(), self.shape()};
  SF_CHECK(values.dim() == 0 || values.dtype() == self.dtype(),
           "{}: Index put requires the source and destination dtypes match, got {} for the "
           "destination and {} for the source",
           op, dtype_name(self.dtype()), dtype_name(values.dtype()));
  const std::vector<Tensor>& list = indices.to_tensor_list();
  const bool any_mask = std::any_of(list.begin(), list.end(), [](const Tensor& t) {
    return t.defined() && t.dtype() == DType::boolean;
  });
  g.values_view = values.shape();
  if (any_mask) {
    SF_CHECK(list.size() == 1,
             "{}: a bool mask index is supported only as the one index (indices has {} entries)",
             op, list.size());
    const Tensor& mask = list[0];
    SF_CHECK(mask.dim() <= self.dim(),
             "{}: too many indices for a tensor of dimension {} (a mask of dimension {})", op,
             self.dim(), mask.dim());
    for (int64_t d = 0; d < mask.dim(); ++d) {
      SF_CHECK(mask.shape()[size_t(d)] == self.shape()[size_t(d)],
               "{}: The shape of the mask {} at index {} does not match the shape of the indexed "
               "tensor {} at index {}",
               op, shape_str(mask.shape()), d, shape_str(self.shape()), d);
    }
    g.mask = true;
    g.mask_dims = mask.dim();
    g.values_shape.assign(self.shape().begin() + mask.dim(), self.shape().end());
    if (g.values_view.size() == g.values_shape.size() + 1 && g.values_view[0] == 1)
      g.values_view.erase(g.values_view.begin());
    SF_CHECK(g.values_view.size() <= g.values_shape.size(),
             "{}: values of shape {} for a bool mask index: one value per masked element is not "
             "supported (their count depends on the mask's values); values must broadcast to {}",
             op, shape_str(values.shape()), shape_str(g.values_shape));
  } else {
    g.values_shape = index_geometry(op, self, indices).spec.shape;
  }
  const Shape& want = g.values_shape;
  bool fits = g.values_view.size() <= want.size();
  for (size_t k = 0; fits && k < g.values_view.size(); ++k) {
    const int64_t v = g.values_view[g.values_view.size() - 1 - k];
    fits = v == 1 || v == want[want.size() - 1 - k];
  }
  SF_CHECK(fits, "{}: shape mismatch: value tensor of shape {} cannot be broadcast to indexing "
           "result of shape {}",
           op, shape_str(values.shape()), shape_str(want));
  return g;
}

}  // namespace symmflow::aten_meta
