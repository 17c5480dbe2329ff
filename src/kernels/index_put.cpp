// Contract in index_put.hpp.
#include "kernels/index_put.hpp"

#include "symmflow/ops/call.hpp"

namespace symmflow::kernels {

void index_put_mask(KernelCall& call, const aten_meta::IndexPutGeometry& g) {
  const Tensor& self = call.arg("self").to_tensor();
  const Tensor& mask = call.arg("indices").to_tensor_list()[0];
  Tensor values = call.arg("values").to_tensor();
  const bool accumulate = call.arg("accumulate").to_bool();
  const Shape& shape = self.shape();
  Strides mask_strides(shape.size(), 0);
  for (int64_t d = 0; d < g.mask_dims; ++d) mask_strides[size_t(d)] = mask.strides()[size_t(d)];
  Tensor cond = mask.as_strided(shape, mask_strides, 0);
  if (values.dtype() != self.dtype()) {  // a 0-dim value (meta_index_put.hpp)
    values = symmflow::call("aten::_to_copy", {values}, {{"dtype", self.dtype()}}).to_tensor();
  }
  if (g.values_view != values.shape()) {  // the leading 1 of the values dropped
    Strides s(values.strides().begin() + 1, values.strides().end());
    values = values.as_strided(g.values_view, s, 0);
  }
  // values, right-aligned, broadcast over self's trailing dims, so over self.
  Tensor put = accumulate ? symmflow::call("aten::add.Tensor", {self, values}).to_tensor() : values;
  Tensor result = symmflow::call("aten::where.self", {cond, put, self}).to_tensor();
  symmflow::call("aten::copy_", {call.out(0), result});
}

}  // namespace symmflow::kernels
