// Meta functions of the indexing ops and cumsum (meta.hpp's contract, Note [gather geometry]):
// index_select, gather and index.Tensor as views of self and of the index tensors over the
// result's shape, checked as PyTorch checks them; cumsum's result type and scan geometry.
#include <algorithm>

#include <fmt/format.h>

#include "ops/aten/meta.hpp"

namespace symmflow::aten_meta {
namespace {

// A 0-dim tensor counts as one dim of size 1 (PyTorch's dim wrapping does the same).
int64_t size_at(const Tensor& t, int64_t d) { return t.dim() == 0 ? 1 : t.shape()[size_t(d)]; }
int64_t stride_at(const Tensor& t, int64_t d) { return t.dim() == 0 ? 0 : t.strides()[size_t(d)]; }

void check_index_dtype(std::string_view op, const std::string& arg, const Tensor& index,
                       bool int32_ok) {
  bool ok = index.dtype() == DType::i64 || (int32_ok && index.dtype() == DType::i32);
  check_dtype(ok, op, arg, index.dtype(), int32_ok ? "i64 or i32" : "i64");
}

}  // namespace

GatherGeometry index_select_geometry(std::string_view op, const Tensor& self, const Value& dim,
                                     const Tensor& index) {
  check_index_dtype(op, "index", index, true);
  SF_CHECK(index.dim() <= 1, "{}: index must be a vector (0-D or 1-D), got shape {}", op,
           shape_str(index.shape()));
  const int64_t d = wrap_dim(dim.to_int(), self.dim());
  Shape shape = self.shape();
  Strides self_strides = self.strides();
  Strides index_strides(shape.size(), 0);
  if (self.dim() > 0) {
    shape[size_t(d)] = index.numel();
    self_strides[size_t(d)] = 0;
    index_strides[size_t(d)] = index.dim() == 0 ? 0 : index.strides()[0];
  } else {
    SF_CHECK(index.numel() == 1, "{}: index of a 0-dim self must have one element, got shape {}",
             op, shape_str(index.shape()));
  }
  GatherGeometry g;
  g.spec = {self.dtype(), shape};
  g.self = self.as_strided(shape, self_strides, 0);
  g.indices.push_back({index.as_strided(shape, index_strides, 0), d, size_at(self, d),
                       stride_at(self, d)});
  return g;
}

GatherGeometry gather_geometry(std::string_view op, const Tensor& self, const Value& dim,
                               const Tensor& index) {
  check_index_dtype(op, "index", index, false);
  const int64_t d = wrap_dim(dim.to_int(), self.dim());
  SF_CHECK(std::max<int64_t>(index.dim(), 1) == std::max<int64_t>(self.dim(), 1),
           "{}: index must have as many dims as self (self has shape {}, index has shape {})", op,
           shape_str(self.shape()), shape_str(index.shape()));
  for (int64_t k = 0; k < index.dim(); ++k) {
    SF_CHECK(k == d || index.shape()[size_t(k)] <= size_at(self, k),
             "{}: index has shape {}, which is larger than self's {} at dim {} (only dim {} may be "
             "larger)", op, shape_str(index.shape()), shape_str(self.shape()), k, d);
  }
  const Shape& shape = index.shape();
  Strides self_strides = self.dim() == index.dim() ? self.strides() : Strides(shape.size(), 0);
  if (!self_strides.empty()) self_strides[size_t(d)] = 0;
  GatherGeometry g;
  g.spec = {self.dtype(), shape};
  g.self = self.as_strided(shape, self_strides, 0);
  g.indices.push_back({index, d, size_at(self, d), stride_at(self, d)});
  return g;
}

GatherGeometry index_geometry(std::string_view op, const Tensor& self, const Value& indices) {
  const std::vector<Tensor>& list = indices.to_tensor_list();
  SF_CHECK(int64_t(list.size()) <= self.dim(),
           "{}: too many indices for a tensor of dimension {} (got {})", op, self.dim(),
           list.size());
  std::vector<int64_t> dims;  // self dims that an index tensor supplies
  Shape b;                    // the broadcast shape of the index tensors
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].defined()) continue;
    const std::string arg = fmt::format("indices[{}]", i);
    SF_CHECK(list[i].dtype() != DType::boolean,
             "{}: {} is a bool mask, which is not supported (the result's shape would depend on "
             "its values; index with integer tensors)", op, arg);
    check_index_dtype(op, arg, list[i], true);
    b = dims.empty() ? list[i].shape()
                     : broadcast_checked(op, "the indices before it", b, arg.c_str(),
                                         list[i].shape());
    dims.push_back(int64_t(i));
  }
  // Adjacent index dims put the broadcast dims where they were; separated ones put them first.
  const bool adjacent = dims.empty() || dims.back() - dims.front() == int64_t(dims.size()) - 1;
  const int64_t at = dims.empty() ? 0 : adjacent ? dims.front() : 0;
  Shape shape;
  Strides self_strides;
  int64_t b_pos = -1;
  for (int64_t d = 0; d <= self.dim(); ++d) {
    if (d == at && b_pos < 0 && !dims.empty()) {
      b_pos = int64_t(shape.size());
      shape.insert(shape.end(), b.begin(), b.end());
      self_strides.insert(self_strides.end(), b.size(), 0);
    }
    if (d == self.dim()) break;
    if (std::find(dims.begin(), dims.end(), d) != dims.end()) continue;
    shape.push_back(self.shape()[size_t(d)]);
    self_strides.push_back(self.strides()[size_t(d)]);
  }
  GatherGeometry g;
  g.spec = {self.dtype(), shape};
  g.self = self.as_strided(shape, self_strides, 0);
  for (int64_t d : dims) {
    const Tensor& t = list[size_t(d)];
    Strides strides(shape.size(), 0);
    const size_t lead = b.size() - t.shape().size();
    for (size_t k = 0; k < t.shape().size(); ++k) {
      if (t.shape()[k] != 1) strides[size_t(b_pos) + lead + k] = t.strides()[k];
    }
    g.indices.push_back({t.as_strided(shape, strides, 0), d, self.shape()[size_t(d)],
                         self.strides()[size_t(d)]});
  }
  return g;
}

int64_t checked_index(std::string_view op, int64_t v, const GatherIndex& g) {
  SF_CHECK(v >= -g.size && v < g.size, "{}: index {} is out of bounds for dimension {} with size {}",
           op, v, g.dim, g.size);
  return v < 0 ? v + g.size : v;
}

CumsumInfo cumsum_info(std::string_view /*op*/, const Tensor& self, const Value& dim,
                       const Value& dtype) {
  CumsumInfo info;
  DType def = is_floating(self.dtype()) ? self.dtype() : DType::i64;
  info.spec = {dtype.to_optional_dtype().value_or(def), self.shape()};
  info.dim = wrap_dim(dim.to_int(), self.dim());
  for (int64_t d = 0; d < self.dim(); ++d) {
    int64_t s = self.shape()[size_t(d)];
    if (d < info.dim) info.outer *= s;
    if (d == info.dim) info.n = s;
    if (d > info.dim) info.inner *= s;
  }
  return info;
}

}  // namespace symmflow::aten_meta
