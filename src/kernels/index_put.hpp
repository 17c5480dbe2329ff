// aten::index_put's bool-mask form (meta_index_put.hpp) on every backend, composed of the
// registry's where.self, add.Tensor, _to_copy and copy_ on the tensors' backend: the mask seen over
// self's shape (stride 0 along the dims it does not cover) selects values (broadcast; with
// accumulate, self + values) over self, and the result is copied into the call's output.
#pragma once

#include "ops/aten/meta_index_put.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::kernels {

void index_put_mask(KernelCall& call, const aten_meta::IndexPutGeometry& g);

}  // namespace symmflow::kernels
