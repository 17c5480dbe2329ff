// Meta functions of the MoE routing ops (meta_moe.hpp): topk and sort lines (Note [sort order]),
// div's rounding modes, histc's range, empty_permuted and _grouped_mm, checked as PyTorch checks
// them.
#include "ops/aten/meta_moe.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace symmflow::aten_meta {
namespace {

// self as [outer, n, inner] lines along dim (a 0-dim self is one line of one element).
SortInfo lines_of(const Tensor& self, const Value& dim) {
  SortInfo info;
  info.dim = wrap_dim(dim.to_int(), self.dim());
  if (self.dim() == 0) return info;
  const Shape& s = self.shape();
  info.n = s[size_t(info.dim)];
  for (int64_t d = 0; d < info.dim; ++d) info.outer *= s[size_t(d)];
  for (int64_t d = info.dim + 1; d < self.dim(); ++d) info.inner *= s[size_t(d)];
  return info;
}

}  // namespace

SortInfo topk_info(std::string_view op, const Tensor& self, const Value& k, const Value& dim,
                   const Value& largest) {
  check_dtype(self.dtype() != DType::boolean, op, "self", self.dtype(),
              "a floating or integer dtype; PyTorch's topk refuses bool");
  SortInfo info = lines_of(self, dim);
  const int64_t kk = k.to_int();
  SF_CHECK(kk >= 0 && kk <= info.n,
           "{}: selected index k out of range (k = {}, dim {} of self with shape {} has size {})",
           op, kk, info.dim, shape_str(self.shape()), info.n);
  info.k = self.dim() == 0 ? 1 : kk;  // a 0-dim self gives its element (PyTorch, even for k = 0)
  info.descending = largest.to_bool();
  Shape shape = self.shape();
  if (!shape.empty()) shape[size_t(info.dim)] = kk;
  info.values = {self.dtype(), shape};
  info.indices = {DType::i64, shape};
  return info;
}

SortInfo sort_info(std::string_view /*op*/, const Tensor& self, const Value& dim,
                   const Value& descending) {
  SortInfo info = lines_of(self, dim);
  info.k = info.n;
  info.descending = descending.to_bool();
  info.values = {self.dtype(), self.shape()};
  info.indices = {DType::i64, self.shape()};
  return info;
}

DivModeInfo div_mode_info(std::string_view op, const Tensor& self, const Value& other,
                          const Value& rounding_mode) {
  DivModeInfo info;
  if (!rounding_mode.is_none()) {
    const std::string& m = rounding_mode.to_string();
    SF_CHECK(m == "trunc" || m == "floor",
             "{}: div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{}'",
             op, m);
    info.mode = m == "trunc" ? RoundingMode::trunc : RoundingMode::floor;
  }
  if (info.mode == RoundingMode::none) {
    info.spec = binary_spec(op, BinaryOp::div, self, other, Value());
    return info;
  }
  // mul's result: the broadcast shape and PyTorch's result_type of the pair.
  info.spec = binary_spec(op, BinaryOp::mul, self, other, Value());
  SF_CHECK(info.spec.dtype != DType::boolean,
           "{}: rounding_mode '{}' of bool operands is not supported (PyTorch: div_{}_cpu not "
           "implemented for 'Bool')",
           op, rounding_mode.to_string(), rounding_mode.to_string());
  return info;
}

HistcInfo histc_info(std::string_view op, const Tensor& self, const Value& bins, const Value& min,
                     const Value& max) {
  check_dtype(is_floating(self.dtype()) || is_integral(self.dtype()), op, "self", self.dtype(),
              "a float or integer dtype");
  HistcInfo info;
  info.bins = bins.to_int();
  SF_CHECK(info.bins > 0, "{}: torch.histogram(): bins must be > 0, but got {} for dimension 0",
           op, info.bins);
  SF_CHECK(min.is_number() && max.is_number(), "{}: min and max must be Scalars, got {} and {}",
           op, min.kind_name(), max.kind_name());
  info.min = min.to_double();
  info.max = max.to_double();
  if (is_integral(self.dtype())) {  // Note [integer histc]: the range in self's dtype
    info.min = std::trunc(info.min);
    info.max = std::trunc(info.max);
  }
  info.from_data = info.min == info.max && self.numel() > 0;
  if (!info.from_data) histc_final_range(op, info.min, info.max);
  info.spec = {self.dtype(), Shape{info.bins}};
  return info;
}

void histc_final_range(std::string_view op, double& lo, double& hi) {
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  SF_CHECK(std::isfinite(lo) && std::isfinite(hi),
           "{}: torch.histc: range of [{}, {}] is not finite", op, lo, hi);
  SF_CHECK(lo < hi, "{}: torch.histc: max must be larger than min (min = {}, max = {})", op, lo,
           hi);
}

TensorSpec empty_permuted_spec(std::string_view op, const Value& size, const Value& layout,
                               const Value& dtype) {
  Shape shape = factory_size(op, size);
  const std::vector<int64_t>& perm = layout.to_int_list();
  SF_CHECK(perm.size() == shape.size(),
           "{}: Number of dimensions in size does not match the length of the physical_layout; "
           "i.e. len(size) = {} is not equal to len(physical_layout) = {}",
           op, shape.size(), perm.size());
  std::vector<bool> seen(shape.size(), false);
  for (int64_t p : perm) {
    SF_CHECK(p >= 0 && p < int64_t(shape.size()),
             "{}: physical_layout entry {} is out of range for {} dims", op, p, shape.size());
    SF_CHECK(!seen[size_t(p)], "{}: Duplicate dim not allowed (physical_layout [{}])", op,
             fmt::join(perm, ", "));
    seen[size_t(p)] = true;
  }
  return {dtype.to_optional_dtype().value_or(DType::f32), shape};
}

GroupedMmInfo grouped_mm_info(std::string_view op, const Tensor& self, const Tensor& mat2,
                              const Value& offs, const Value& bias, const Value& out_dtype) {
  std::optional<Tensor> o = offs.to_optional_tensor();
  SF_CHECK(self.dim() == 2 && mat2.dim() == 3 && o,
           "{}: only self [S, K] (rows sorted by group) with mat2 [G, K, N] and offs [G] is "
           "supported; got self of shape {}, mat2 of shape {} and offs {}",
           op, shape_str(self.shape()), shape_str(mat2.shape()),
           o ? shape_str(o->shape()) : std::string("None"));
  const DType t = self.dtype();
  check_dtype(t == DType::f32 || t == DType::bf16 || t == DType::f16, op, "self", t,
              "f32, bf16 or f16");
  SF_CHECK(mat2.dtype() == t, "{}: self has dtype {} and mat2 has dtype {}; expected the same dtype",
           op, dtype_name(t), dtype_name(mat2.dtype()));
  check_dtype(o->dtype() == DType::i32 || o->dtype() == DType::i64, op, "offs", o->dtype(),
              "i32 or i64");
  SF_CHECK(o->dim() == 1 && o->size(0) == mat2.size(0),
           "{}: offs must be 1-D with one entry per group (mat2 has {} groups), got shape {}", op,
           mat2.size(0), shape_str(o->shape()));
  SF_CHECK(self.size(1) == mat2.size(1),
           "{}: self of shape {} and mat2 of shape {} do not multiply (K = {} vs {})", op,
           shape_str(self.shape()), shape_str(mat2.shape()), self.size(1), mat2.size(1));
  SF_CHECK(bias.is_none(), "{}: bias is not supported (PyTorch: Bias not supported yet)", op);
  std::optional<DType> od = out_dtype.to_optional_dtype();
  SF_CHECK(!od || *od == t, "{}: Grouped gemm output dtype must match `mat_a` dtype ({}), got {}",
           op, dtype_name(t), dtype_name(od.value_or(t)));
  GroupedMmInfo info;
  info.rows = self.size(0);
  info.k = self.size(1);
  info.n = mat2.size(2);
  info.groups = mat2.size(0);
  info.spec = {t, Shape{info.rows, info.n}};
  return info;
}

void check_grouped_mm_offsets(std::string_view op, const std::vector<int64_t>& ends,
                              int64_t rows) {
  int64_t prev = 0;
  for (size_t g = 0; g < ends.size(); ++g) {
    SF_CHECK(ends[g] >= prev && ends[g] <= rows,
             "{}: offs must be non-decreasing row ends in [0, {}]; offs[{}] = {} after {}", op,
             rows, g, ends[g], prev);
    prev = ends[g];
  }
}

}  // namespace symmflow::aten_meta
