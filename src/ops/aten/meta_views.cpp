// Meta functions of the aten view and shape ops: view/reshape strides (PyTorch's computeStride),
// slice, transpose, t, cat and copy_ checks. See meta.hpp for the contract.
#include <algorithm>
#include <limits>

#include "ops/aten/meta.hpp"

namespace symmflow::aten_meta {

Shape infer_size(std::string_view op, const std::vector<int64_t>& size, int64_t numel_in) {
  Shape shape = size;
  int64_t known = 1;
  std::optional<size_t> infer;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      SF_CHECK(!infer, "{}: only one dimension can be inferred in shape {}", op, shape_str(size));
      infer = i;
    } else {
      SF_CHECK(shape[i] >= 0, "{}: invalid shape dimension {} in {}", op, shape[i],
               shape_str(size));
      known *= shape[i];
    }
  }
  if (infer) {
    SF_CHECK(known != 0 && numel_in % known == 0,
             "{}: shape {} is invalid for input of size {}", op, shape_str(size), numel_in);
    shape[*infer] = numel_in / known;
  }
  SF_CHECK(numel(shape) == numel_in, "{}: shape {} is invalid for input of size {}", op,
           shape_str(size), numel_in);
  return shape;
}

std::optional<Strides> compute_view_strides(const Shape& old_shape, const Strides& old_strides,
                                            const Shape& new_shape) {
  if (old_shape.empty()) return Strides(new_shape.size(), 1);
  int64_t n = numel(old_shape);
  if (n == 0 && old_shape == new_shape) return old_strides;
  Strides new_strides(new_shape.size());
  if (n == 0) return contiguous_strides(new_shape);
  int64_t view_d = int64_t(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t tensor_d = int64_t(old_shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[size_t(tensor_d)];
    // A chunk ends where the next-outer dim is not laid out right after this one.
    if (tensor_d == 0 || (old_shape[size_t(tensor_d - 1)] != 1 &&
                          old_strides[size_t(tensor_d - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 &&
             (view_numel < tensor_numel || new_shape[size_t(view_d)] == 1)) {
        new_strides[size_t(view_d)] = view_numel * chunk_base_stride;
        view_numel *= new_shape[size_t(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[size_t(tensor_d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

ViewGeometry view_geometry(std::string_view op, const Tensor& self, const Value& size) {
  Shape shape = infer_size(op, size.to_int_list(), self.numel());
  std::optional<Strides> strides = compute_view_strides(self.shape(), self.strides(), shape);
  SF_CHECK(strides.has_value(),
           "{}: view size {} is not compatible with input tensor's size {} and stride {} (at least "
           "one dimension spans across two contiguous subspaces); use reshape instead",
           op, shape_str(shape), shape_str(self.shape()), shape_str(self.strides()));
  return {shape, *strides, 0};
}

ReshapeGeometry reshape_geometry(std::string_view op, const Tensor& self, const Value& shape) {
  ReshapeGeometry g;
  g.shape = infer_size(op, shape.to_int_list(), self.numel());
  g.strides = compute_view_strides(self.shape(), self.strides(), g.shape);
  return g;
}

ViewGeometry slice_geometry(std::string_view op, const Tensor& self, const Value& dim,
                            const Value& start, const Value& end, const Value& step) {
  SF_CHECK(self.dim() > 0, "{}: slice cannot be applied to a 0-dim tensor", op);
  int64_t d = wrap_dim(dim.to_int(), self.dim(), "dim");
  int64_t st = step.to_int();
  SF_CHECK(st > 0, "{}: slice step must be positive, got {}", op, st);
  int64_t size = self.shape()[size_t(d)];
  int64_t b = start.to_optional_int().value_or(0);
  int64_t e = end.to_optional_int().value_or(std::numeric_limits<int64_t>::max());
  if (b < 0) b += size;
  if (e < 0) e += size;
  b = std::clamp<int64_t>(b, 0, size);
  e = std::clamp<int64_t>(e, b, size);
  ViewGeometry g{self.shape(), self.strides(), b * self.strides()[size_t(d)]};
  // Written so that no step, however large, overflows: a step past the size selects at most one
  // element, whose stride is then irrelevant (it is capped at the size).
  g.shape[size_t(d)] = e == b ? 0 : 1 + (e - b - 1) / st;
  g.strides[size_t(d)] *= std::min(st, std::max<int64_t>(size, 1));
  return g;
}

ViewGeometry transpose_geometry(std::string_view op, const Tensor& self, int64_t dim0,
                                int64_t dim1) {
  ViewGeometry g{self.shape(), self.strides(), 0};
  if (self.dim() == 0) {
    wrap_dim(dim0, 0, "dim0");
    wrap_dim(dim1, 0, "dim1");
    return g;
  }
  size_t a = size_t(wrap_dim(dim0, self.dim(), "dim0"));
  size_t b = size_t(wrap_dim(dim1, self.dim(), "dim1"));
  std::swap(g.shape[a], g.shape[b]);
  std::swap(g.strides[a], g.strides[b]);
  return g;
}

ViewGeometry t_geometry(std::string_view op, const Tensor& self) {
  SF_CHECK(self.dim() <= 2, "{}: t() expects a tensor with <= 2 dimensions, but self is {}-D", op,
           self.dim());
  if (self.dim() < 2) return {self.shape(), self.strides(), 0};
  return transpose_geometry(op, self, 0, 1);
}

ViewGeometry permute_geometry(std::string_view op, const Tensor& self, const Value& dims) {
  std::vector<int64_t> order = dims.to_int_list();
  SF_CHECK(int64_t(order.size()) == self.dim(),
           "{}: dims has {} entries but self has {} dimensions (shape {}); expected one entry per "
           "dimension",
           op, order.size(), self.dim(), shape_str(self.shape()));
  ViewGeometry g{Shape(order.size()), Strides(order.size()), 0};
  std::vector<bool> seen(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    size_t d = size_t(wrap_dim(order[i], self.dim(), "dims entry"));
    SF_CHECK(!seen[d], "{}: dim {} appears more than once in dims {}", op, d, shape_str(order));
    seen[d] = true;
    g.shape[i] = self.shape()[d];
    g.strides[i] = self.strides()[d];
  }
  return g;
}

ViewGeometry expand_geometry(std::string_view op, const Tensor& self, const Value& size) {
  std::vector<int64_t> sizes = size.to_int_list();
  SF_CHECK(int64_t(sizes.size()) >= self.dim(),
           "{}: the number of sizes provided ({}) must be greater or equal to the number of "
           "dimensions in the tensor ({})",
           op, sizes.size(), self.dim());
  ViewGeometry g{Shape(sizes.size()), Strides(sizes.size()), 0};
  const size_t lead = sizes.size() - size_t(self.dim());
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i < lead) {
      SF_CHECK(sizes[i] >= 0,
               "{}: the expanded size {} is not allowed in a leading, non-existing dimension {}",
               op, sizes[i], i);
      g.shape[i] = sizes[i];
      g.strides[i] = 0;
      continue;
    }
    const int64_t have = self.shape()[i - lead], want = sizes[i] == -1 ? have : sizes[i];
    SF_CHECK(have == want || have == 1,
             "{}: the expanded size of the tensor ({}) must match the existing size ({}) at "
             "non-singleton dimension {}; target sizes {}, tensor sizes {}",
             op, want, have, i, shape_str(sizes), shape_str(self.shape()));
    SF_CHECK(want >= 0, "{}: invalid expanded size {} at dimension {}", op, want, i);
    g.shape[i] = want;
    g.strides[i] = have == want ? self.strides()[i - lead] : 0;
  }
  return g;
}

ViewGeometry unsqueeze_geometry(std::string_view op, const Tensor& self, const Value& dim) {
  (void)op;
  size_t d = size_t(wrap_dim(dim.to_int(), self.dim() + 1, "dim"));
  ViewGeometry g{self.shape(), self.strides(), 0};
  // The new dim's stride is what a contiguous layout would give it (PyTorch's choice).
  int64_t stride = d < size_t(self.dim()) ? g.shape[d] * g.strides[d] : 1;
  g.shape.insert(g.shape.begin() + int64_t(d), 1);
  g.strides.insert(g.strides.begin() + int64_t(d), stride);
  return g;
}

CatInfo cat_info(std::string_view op, const std::vector<Tensor>& tensors, const Value& dim) {
  SF_CHECK(!tensors.empty(), "{}: expected a non-empty list of tensors", op);
  CatInfo info;
  std::vector<Operand> operands;
  std::optional<size_t> ref;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    SF_CHECK(t.defined(), "{}: tensors[{}] is undefined", op, i);
    SF_CHECK(t.dim() > 0, "{}: zero-dimensional tensor (at position {}) cannot be concatenated",
             op, i);
    bool skip = t.dim() == 1 && t.numel() == 0;  // legacy: 1-D empty tensors are ignored
    info.skipped.push_back(skip);
    operands.push_back({t.dtype(), OperandKind::dim});
    if (!skip && !ref) ref = i;
  }
  info.spec.dtype = result_type(operands);
  if (!ref) {  // every input is a legacy empty tensor
    info.spec.shape = {0};
    info.dim = wrap_dim(dim.to_int(), 1, "dim");
    return info;
  }
  const Tensor& r = tensors[*ref];
  info.dim = wrap_dim(dim.to_int(), r.dim(), "dim");
  info.spec.shape = r.shape();
  info.spec.shape[size_t(info.dim)] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (info.skipped[i]) continue;
    const Tensor& t = tensors[i];
    SF_CHECK(t.dim() == r.dim(),
             "{}: tensors[{}] has {} dimensions but tensors[{}] has {}; expected the same rank", op,
             i, t.dim(), *ref, r.dim());
    for (int64_t d = 0; d < t.dim(); ++d) {
      SF_CHECK(d == info.dim || t.shape()[size_t(d)] == r.shape()[size_t(d)],
               "{}: tensors[{}] has shape {} but tensors[{}] has shape {}; sizes must match "
               "except in dimension {}",
               op, i, shape_str(t.shape()), *ref, shape_str(r.shape()), info.dim);
    }
    info.spec.shape[size_t(info.dim)] += t.shape()[size_t(info.dim)];
  }
  return info;
}

void check_copy(std::string_view op, const Tensor& self, const Tensor& src) {
  const Shape& a = self.shape();
  const Shape& b = src.shape();
  bool ok = b.size() <= a.size();
  for (size_t i = 0; ok && i < b.size(); ++i) {
    int64_t db = b[b.size() - 1 - i];
    ok = db == 1 || db == a[a.size() - 1 - i];
  }
  SF_CHECK(ok, "{}: src with shape {} cannot be broadcast to self with shape {}", op,
           shape_str(b), shape_str(a));
}

}  // namespace symmflow::aten_meta
