// Meta functions of the comparisons and bitwise ops (meta.hpp's contract): eq/ne/lt/le/gt/ge in
// both overloads and bitwise_and/or/xor/not, typed and checked as PyTorch does (the comparison
// runs in result_type(self, other); bitwise ops take bool and integer types only).
#include "ops/aten/meta.hpp"

namespace symmflow::aten_meta {
namespace {

// The shape of `self op other` (a Scalar other leaves self's shape) and the operands' promotion.
Shape pair_shape(std::string_view op, const Tensor& self, const Value& other) {
  if (other.is_tensor()) {
    return broadcast_checked(op, "self", self.shape(), "other", other.to_tensor().shape());
  }
  SF_CHECK(other.is_number(), "{}: other must be a Scalar, got {}", op, other.kind_name());
  return self.shape();
}

}  // namespace

CompareInfo compare_info(std::string_view op, const Tensor& self, const Value& other) {
  CompareInfo info;
  info.spec = {DType::boolean, pair_shape(op, self, other)};
  Operand operands[] = {operand_of(self), operand_of(other)};
  info.compute = result_type(operands);
  return info;
}

TensorSpec bitwise_spec(std::string_view op, const Tensor& self, const Value& other) {
  constexpr const char* kExpected = "bool or an integer dtype";
  check_dtype(!is_floating(self.dtype()), op, "self", self.dtype(), kExpected);
  if (other.is_none()) return {self.dtype(), self.shape()};
  Shape shape = pair_shape(op, self, other);
  if (other.is_tensor()) {
    DType t = other.to_tensor().dtype();
    check_dtype(!is_floating(t), op, "other", t, kExpected);
  } else {
    SF_CHECK(!other.is_double(), "{}: other is the float Scalar {}, which is not supported "
             "(expected bool or an integer)", op, other.to_double());
  }
  Operand operands[] = {operand_of(self), operand_of(other)};
  return {result_type(operands), shape};
}

}  // namespace symmflow::aten_meta
