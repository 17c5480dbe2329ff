#include "symmflow/core/shape.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "symmflow/core/error.hpp"

namespace symmflow {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

bool is_contiguous(const Shape& shape, const Strides& strides) {
  if (numel(shape) == 0) return true;
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t wrap_dim(int64_t dim, int64_t rank, const char* what) {
  int64_t r = std::max<int64_t>(rank, 1);
  SF_CHECK(dim >= -r && dim < r, "{} {} out of range for a tensor of rank {} (expected [{}, {}])",
           what, dim, rank, -r, r - 1);
  return dim < 0 ? dim + r : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    SF_CHECK(da == db || da == 1 || db == 1, "shapes {} and {} do not broadcast", shape_str(a),
             shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d) {
    if (from[d] != to[lead + d] && from[d] != 1) return false;
  }
  return true;
}

}  // namespace symmflow
