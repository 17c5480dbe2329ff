// Meta functions of the mask ops (meta.hpp's contract): arange.start_step, logical_and/or/not,
// where.self and the broadcast check they share, as PyTorch types and checks them (comparisons:
// meta_logic.cpp).
#include <cmath>

#include "ops/aten/meta.hpp"

namespace symmflow::aten_meta {

ArangeInfo arange_info(std::string_view op, const Value& start, const Value& end, const Value& step,
                       const Value& dtype) {
  for (const Value* v : {&start, &end, &step}) {
    SF_CHECK(v->is_number() && !v->is_bool(), "{}: start, end and step must be numbers, got {}", op,
             v->kind_name());
  }
  const bool all_int = start.is_int() && end.is_int() && step.is_int();
  ArangeInfo info;
  info.start = start.to_double();
  info.step = step.to_double();
  const double e = end.to_double();
  SF_CHECK(info.step != 0, "{}: step must be nonzero", op);
  SF_CHECK(std::isfinite(info.start) && std::isfinite(e), "{}: unsupported range: {} -> {}", op,
           info.start, e);
  SF_CHECK((info.step > 0 && e >= info.start) || (info.step < 0 && e <= info.start),
           "{}: upper bound and larger bound inconsistent with step sign", op);
  info.spec.dtype = dtype.to_optional_dtype().value_or(all_int ? DType::i64 : DType::f32);
  int64_t count = 0;
  if (all_int) {  // ceil((end - start) / step) in integers
    const int64_t st = step.to_int();
    count = (end.to_int() - start.to_int() + st - (st > 0 ? 1 : -1)) / st;
  } else {
    count = int64_t(std::ceil((e - info.start) / info.step));
  }
  info.spec.shape = {std::max<int64_t>(count, 0)};
  return info;
}

Shape broadcast_checked(std::string_view op, const char* a_name, const Shape& a, const char* b_name,
                        const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    SF_CHECK(da == db || da == 1 || db == 1,
             "{}: {} with shape {} and {} with shape {} do not broadcast", op, a_name, shape_str(a),
             b_name, shape_str(b));
  }
  return broadcast_shapes(a, b);
}

TensorSpec logical_spec(std::string_view op, const Tensor& self, const Tensor* other) {
  if (!other) return {DType::boolean, self.shape()};
  return {DType::boolean, broadcast_checked(op, "self", self.shape(), "other", other->shape())};
}

TensorSpec where_spec(std::string_view op, const Tensor& condition, const Tensor& self,
                      const Tensor& other) {
  check_dtype(condition.dtype() == DType::boolean, op, "condition", condition.dtype(), "bool");
  Shape shape = broadcast_checked(op, "condition", condition.shape(), "self", self.shape());
  shape = broadcast_checked(op, "condition and self", shape, "other", other.shape());
  Operand operands[] = {operand_of(self), operand_of(other)};
  return {result_type(operands), shape};
}

}  // namespace symmflow::aten_meta
