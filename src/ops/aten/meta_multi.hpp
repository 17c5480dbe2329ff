// Meta functions of the aten ops with several results (Note [list returns] in
// symmflow/schema/schema.hpp): the splits, a view per piece, and native_layer_norm's output, mean
// and rstd. Shared, like meta.hpp, by the shape functions and the kernels of every backend, so both
// agree on the results and refuse the same inputs with the same messages.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ops/aten/meta.hpp"

namespace symmflow::aten_meta {

// split_with_sizes(self, split_sizes, dim): one view of self per size, consecutive along dim.
// Refuses a 0-dim self, a negative size and sizes not summing to self's size at dim (PyTorch's
// texts, after the op name).
std::vector<ViewGeometry> split_with_sizes_geometry(std::string_view op, const Tensor& self,
                                                    const Value& split_sizes, const Value& dim);
// split.Tensor(self, split_size, dim): ceil(size / split_size) views (at least one), the last one
// shorter when split_size does not divide the size; split_size 0 only for a dim of size 0.
std::vector<ViewGeometry> split_geometry(std::string_view op, const Tensor& self,
                                         const Value& split_size, const Value& dim);

// native_layer_norm(input, normalized_shape, weight, bias, eps) over `rows` contiguous rows of
// `inner` = numel(normalized_shape) elements: out (input's dtype and shape), mean and rstd (the
// input's leading dims, 1 for each normalized dim; f64 for an f64 input, else f32, as PyTorch's
// meta and CUDA kernels give). weight and bias, when given, have normalized_shape's shape and a
// floating dtype.
struct LayerNormInfo {
  TensorSpec out;
  TensorSpec stats;
  int64_t rows = 0, inner = 1;
  double eps = 0;
};
LayerNormInfo layer_norm_info(std::string_view op, const Tensor& input,
                              const Value& normalized_shape, const Value& weight,
                              const Value& bias, const Value& eps);

}  // namespace symmflow::aten_meta
