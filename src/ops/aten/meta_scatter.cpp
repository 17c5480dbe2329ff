// The meta functions of meta_scatter.hpp (squeeze.dims, constant_pad_nd, scatter.value,
// slice_scatter); the contract is there.
#include "ops/aten/meta_scatter.hpp"

#include <algorithm>

namespace symmflow::aten_meta {

ViewGeometry squeeze_dims_geometry(std::string_view op, const Tensor& self, const Value& dims) {
  ViewGeometry g{self.shape(), self.strides(), 0};
  std::vector<int64_t> list = dims.to_int_list();
  std::vector<bool> drop(size_t(std::max<int64_t>(self.dim(), 1)), false);
  for (int64_t d : list) {
    const int64_t w = wrap_dim(d, self.dim(), "dim");
    SF_CHECK(!drop[size_t(w)], "{}: dim {} appears multiple times in the list of dims", op, w);
    drop[size_t(w)] = true;
  }
  if (self.dim() == 0) return g;
  g.shape.clear();
  g.strides.clear();
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (drop[size_t(d)] && self.shape()[size_t(d)] == 1) continue;
    g.shape.push_back(self.shape()[size_t(d)]);
    g.strides.push_back(self.strides()[size_t(d)]);
  }
  return g;
}

PadGeometry pad_geometry(std::string_view op, const Tensor& self, const Value& pad) {
  const std::vector<int64_t> p = pad.to_int_list();
  SF_CHECK(p.size() % 2 == 0, "{}: Length of pad must be even but instead it equals {}", op,
           p.size());
  const int64_t l_inp = self.dim(), l_pad = int64_t(p.size() / 2), l_diff = l_inp - l_pad;
  SF_CHECK(l_inp >= l_pad,
           "{}: Length of pad should be no more than twice the number of dimensions of the input. "
           "Pad length is {} while the input has {} dimensions.",
           op, p.size(), l_inp);
  PadGeometry g;
  g.spec = {self.dtype(), self.shape()};
  g.window = self.shape();
  Shape self_start(size_t(l_inp), 0);
  g.out_start.assign(size_t(l_inp), 0);
  for (int64_t i = l_diff; i < l_inp; ++i) {
    const size_t d = size_t(i);
    const size_t at = size_t(2 * (l_inp - i - 1));
    const int64_t before = p[at], after = p[at + 1], size = self.shape()[d];
      // What self keeps after the negative pads (PyTorch narrows self so, and checks this first).
    const int64_t window = size + std::min<int64_t>(before, 0) + std::min<int64_t>(after, 0);
    SF_CHECK(window >= 0,
             "{}: narrow(): length must be non-negative (padding {} and {} of dimension {} of "
             "size {})",
             op, before, after, i, size);
    const int64_t new_dim = size + before + after;  // >= window: kept for PyTorch's own check
    SF_CHECK(new_dim >= 0,
             "{}: The input size {}, plus negative padding {} and {} resulted in a negative output "
             "size, which is invalid. Check dimension {} of your input.",
             op, size, before, after, i);
    g.spec.shape[d] = new_dim;
    g.window[d] = window;
    self_start[d] = std::max<int64_t>(-before, 0);
    g.out_start[d] = std::max<int64_t>(before, 0);
  }
  int64_t self_offset = 0;
  for (size_t d = 0; d < size_t(l_inp); ++d) self_offset += self_start[d] * self.strides()[d];
  g.self_view = self.as_strided(g.window, self.strides(), numel(g.window) == 0 ? 0 : self_offset);
  return g;
}

Tensor pad_window(const PadGeometry& g, const Tensor& out) {
  int64_t offset = 0;
  for (size_t d = 0; d < g.out_start.size(); ++d) offset += g.out_start[d] * out.strides()[d];
  return out.as_strided(g.window, out.strides(), numel(g.window) == 0 ? 0 : offset);
}

ScatterGeometry scatter_geometry(std::string_view op, const Tensor& self, const Value& dim,
                                 const Tensor& index, const Tensor& out) {
  ScatterGeometry g;
  g.spec = {self.dtype(), self.shape()};
  const int64_t d = wrap_dim(dim.to_int(), self.dim());
  g.empty = index.numel() == 0;
  if (g.empty) return g;  // PyTorch checks nothing else then
  SF_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32,
           "{}: scatter(): Expected dtype int32/int64 for index, got {}", op,
           dtype_name(index.dtype()));
  const int64_t rank = std::max<int64_t>(self.dim(), 1);
  SF_CHECK(std::max<int64_t>(index.dim(), 1) == rank,
           "{}: Index tensor must have the same number of dimensions as self tensor (self has "
           "shape {}, index has shape {})",
           op, shape_str(self.shape()), shape_str(index.shape()));
  for (int64_t k = 0; k < rank; ++k) {
    const int64_t have = index.dim() == 0 ? 1 : index.shape()[size_t(k)];
    const int64_t limit = self.dim() == 0 ? 1 : self.shape()[size_t(k)];
    SF_CHECK(k == d || have <= limit,
             "{}: Expected index {} to be no larger than self {} apart from dimension {}", op,
             shape_str(index.shape()), shape_str(self.shape()), d);
  }
  // Note [gather geometry] over out, as gather_geometry lays it out (which takes i64 only).
  const Shape& shape = index.shape();
  Strides out_strides = out.dim() == index.dim() ? out.strides() : Strides(shape.size(), 0);
  if (!out_strides.empty()) out_strides[size_t(d)] = 0;
  g.gather.spec = {self.dtype(), shape};  // the shape iterated over: index's
  g.gather.self = out.as_strided(shape, out_strides, 0);
  g.gather.indices.push_back({index, d, self.dim() == 0 ? 1 : self.shape()[size_t(d)],
                              out.dim() == 0 ? 0 : out.strides()[size_t(d)]});
  return g;
}

int64_t checked_scatter_index(std::string_view op, int64_t v, const GatherIndex& g) {
  SF_CHECK(v >= 0 && v < g.size, "{}: index {} is out of bounds for dimension {} with size {}", op,
           v, g.dim, g.size);
  return v;
}

ViewGeometry slice_scatter_geometry(std::string_view op, const Tensor& self, const Tensor& src,
                                    const Value& dim, const Value& start, const Value& end,
                                    const Value& step) {
  ViewGeometry g = slice_geometry(op, self, dim, start, end, step);
  SF_CHECK(g.shape == src.shape(),
           "{}: expected src to have a size equal to the slice of self. src size = {}, slice size "
           "= {}",
           op, shape_str(src.shape()), shape_str(g.shape));
  return g;
}

}  // namespace symmflow::aten_meta
