// Meta functions of the aten ops with several results; see meta_multi.hpp for the contract.
#include "ops/aten/meta_multi.hpp"

#include <algorithm>

namespace symmflow::aten_meta {
namespace {

// The pieces of self along dim `d`, of the given sizes (which sum to self's size there).
std::vector<ViewGeometry> pieces(const Tensor& self, int64_t d, const std::vector<int64_t>& sizes) {
  std::vector<ViewGeometry> out;
  out.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t size : sizes) {
    ViewGeometry g{self.shape(), self.strides(), start * self.strides()[size_t(d)]};
    g.shape[size_t(d)] = size;
    out.push_back(std::move(g));
    start += size;
  }
  return out;
}

}  // namespace

std::vector<ViewGeometry> split_with_sizes_geometry(std::string_view op, const Tensor& self,
                                                    const Value& split_sizes, const Value& dim) {
  SF_CHECK(self.dim() > 0, "{}: split expects at least a 1-dimensional tensor", op);
  const int64_t d = wrap_dim(dim.to_int(), self.dim(), "dim");
  const std::vector<int64_t>& sizes = split_sizes.to_int_list();
  const int64_t dim_size = self.shape()[size_t(d)];
  int64_t total = 0;
  for (int64_t s : sizes) {
    SF_CHECK(s >= 0,
             "{}: split_with_sizes expects split_sizes have only non-negative entries, but got "
             "split_sizes={}",
             op, shape_str(sizes));
    total += std::min(s, dim_size + 1);  // no overflow: a size past the dim already fails
  }
  SF_CHECK(total == dim_size,
           "{}: split_with_sizes expects split_sizes to sum exactly to {} (input tensor's size at "
           "dimension {}), but got split_sizes={}",
           op, dim_size, d, shape_str(sizes));
  return pieces(self, d, sizes);
}

std::vector<ViewGeometry> split_geometry(std::string_view op, const Tensor& self,
                                         const Value& split_size, const Value& dim) {
  SF_CHECK(self.dim() > 0, "{}: split expects at least a 1-dimensional tensor", op);
  const int64_t d = wrap_dim(dim.to_int(), self.dim(), "dim");
  const int64_t size = split_size.to_int();
  SF_CHECK(size >= 0, "{}: split expects split_size be non-negative, but got split_size={}", op,
           size);
  const int64_t dim_size = self.shape()[size_t(d)];
  SF_CHECK(size > 0 || dim_size == 0,
           "{}: split_size can only be 0 if dimension size is 0, but got dimension size of {}", op,
           dim_size);
  // As PyTorch: at least one piece (split_size past the size gives the whole tensor).
  const int64_t count = size == 0 ? 1 : std::max<int64_t>(1, dim_size / size + (dim_size % size != 0));
  std::vector<int64_t> sizes(size_t(count), size);
  sizes.back() = dim_size - size * (count - 1);
  return pieces(self, d, sizes);
}

LayerNormInfo layer_norm_info(std::string_view op, const Tensor& input,
                              const Value& normalized_shape, const Value& weight,
                              const Value& bias, const Value& eps) {
  check_dtype(is_floating(input.dtype()), op, "input", input.dtype(), "f32, f64, bf16 or f16");
  const Shape ns = normalized_shape.to_int_list();
  SF_CHECK(!ns.empty(),
           "{}: expected normalized_shape to be at least 1-dimensional, i.e., containing at least "
           "one element, but got normalized_shape = {}",
           op, shape_str(ns));
  const Shape& s = input.shape();
  const bool match =
      ns.size() <= s.size() && std::equal(ns.begin(), ns.end(), s.end() - ptrdiff_t(ns.size()));
  SF_CHECK(match, "{}: given normalized_shape={}, expected input with shape [*, {}], but got input "
           "of size {}",
           op, shape_str(ns), shape_str(ns).substr(1, shape_str(ns).size() - 2), shape_str(s));
  for (const char* name : {"weight", "bias"}) {
    std::optional<Tensor> t = (name[0] == 'w' ? weight : bias).to_optional_tensor();
    if (!t) continue;
    SF_CHECK(t->shape() == ns,
             "{}: expected {} to be of same shape as normalized_shape, but got {} of shape {} and "
             "normalized_shape = {}",
             op, name, name, shape_str(t->shape()), shape_str(ns));
    check_dtype(is_floating(t->dtype()), op, name, t->dtype(), "f32, f64, bf16 or f16");
  }
  LayerNormInfo info;
  info.out = {input.dtype(), s};
  Shape stats = s;
  std::fill(stats.end() - ptrdiff_t(ns.size()), stats.end(), 1);
  info.stats = {input.dtype() == DType::f64 ? DType::f64 : DType::f32, stats};
  info.inner = numel(ns);
  info.rows = numel(stats);
  info.eps = eps.to_double();
  return info;
}

}  // namespace symmflow::aten_meta
