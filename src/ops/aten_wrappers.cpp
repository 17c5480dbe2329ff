// Typed aten wrappers (include/symmflow/ops/aten.hpp): each builds Values and goes through
// symmflow::call with the op's full overload name; copy_ binds its op once (executors copy with
// it on every run).
#include <cmath>

#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/call.hpp"

namespace symmflow::aten {
namespace {

// A Scalar: integral values travel as ints so that they are valid for integer tensors.
Value scalar(double v) {
  if (std::isfinite(v) && v == std::trunc(v) && std::abs(v) < 9.0e15) return Value(int64_t(v));
  return Value(v);
}

Tensor call_t(const char* op, const std::vector<Value>& args, const KwArgs& kwargs = {}) {
  return call(op, args, kwargs).to_tensor();
}

Value opt(std::optional<int64_t> v) { return v ? Value(*v) : Value(None{}); }

KwArgs dtype_kwarg(std::optional<DType> dtype) {
  KwArgs kwargs;
  if (dtype) kwargs.emplace_back("dtype", *dtype);
  return kwargs;
}

}  // namespace

Tensor add(const Tensor& self, const Tensor& other, double alpha) {
  return call_t("aten::add.Tensor", {self, other}, {{"alpha", scalar(alpha)}});
}
Tensor add(const Tensor& self, double other, double alpha) {
  return call_t("aten::add.Scalar", {self, scalar(other), scalar(alpha)});
}
Tensor sub(const Tensor& self, const Tensor& other, double alpha) {
  return call_t("aten::sub.Tensor", {self, other}, {{"alpha", scalar(alpha)}});
}
Tensor sub(const Tensor& self, double other, double alpha) {
  return call_t("aten::sub.Scalar", {self, scalar(other), scalar(alpha)});
}
Tensor mul(const Tensor& self, const Tensor& other) { return call_t("aten::mul.Tensor", {self, other}); }
Tensor mul(const Tensor& self, double other) { return call_t("aten::mul.Scalar", {self, scalar(other)}); }
Tensor div(const Tensor& self, const Tensor& other) { return call_t("aten::div.Tensor", {self, other}); }
Tensor div(const Tensor& self, double other) { return call_t("aten::div.Scalar", {self, scalar(other)}); }

Tensor mm(const Tensor& self, const Tensor& mat2) { return call_t("aten::mm", {self, mat2}); }
Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2, double beta, double alpha) {
  return call_t("aten::addmm", {self, mat1, mat2}, {{"beta", scalar(beta)}, {"alpha", scalar(alpha)}});
}
Tensor bmm(const Tensor& self, const Tensor& mat2) { return call_t("aten::bmm", {self, mat2}); }

Tensor sin(const Tensor& self) { return call_t("aten::sin", {self}); }
Tensor cos(const Tensor& self) { return call_t("aten::cos", {self}); }
Tensor exp(const Tensor& self) { return call_t("aten::exp", {self}); }
Tensor tanh(const Tensor& self) { return call_t("aten::tanh", {self}); }
Tensor relu(const Tensor& self) { return call_t("aten::relu", {self}); }
Tensor gelu(const Tensor& self, const std::string& approximate) {
  return call_t("aten::gelu", {self}, {{"approximate", approximate}});
}
Tensor silu(const Tensor& self) { return call_t("aten::silu", {self}); }
Tensor sigmoid(const Tensor& self) { return call_t("aten::sigmoid", {self}); }
Tensor neg(const Tensor& self) { return call_t("aten::neg", {self}); }

Tensor rms_norm(const Tensor& input, const std::vector<int64_t>& normalized_shape,
                const std::optional<Tensor>& weight, std::optional<double> eps) {
  return call_t("aten::rms_norm", {input, normalized_shape, weight ? Value(*weight) : Value(None{}),
                                   eps ? Value(*eps) : Value(None{})});
}
Tensor softmax(const Tensor& self, int64_t dim) {
  return call_t("aten::_softmax", {self, dim, false});
}
Tensor sum(const Tensor& self, const std::vector<int64_t>& dim, bool keepdim,
           std::optional<DType> dtype) {
  return call_t("aten::sum.dim_IntList", {self, dim, keepdim}, dtype_kwarg(dtype));
}
Tensor mean(const Tensor& self, const std::vector<int64_t>& dim, bool keepdim,
            std::optional<DType> dtype) {
  return call_t("aten::mean.dim", {self, dim, keepdim}, dtype_kwarg(dtype));
}

Tensor clone(const Tensor& self) { return call_t("aten::clone", {self}); }
const Tensor& copy_(const Tensor& self, const Tensor& src) {
  static const OpDef& copy_op = Registry::global().get("aten::copy_");
  std::vector<Value> bound{self, src, false};
  std::vector<Value> none;
  call_bound_into(copy_op, bound, none);
  return self;
}
Tensor view(const Tensor& self, const std::vector<int64_t>& size) {
  return call_t("aten::view", {self, size});
}
Tensor reshape(const Tensor& self, const std::vector<int64_t>& shape) {
  return call_t("aten::reshape", {self, shape});
}
Tensor slice(const Tensor& self, int64_t dim, std::optional<int64_t> start,
             std::optional<int64_t> end, int64_t step) {
  return call_t("aten::slice.Tensor", {self, dim, opt(start), opt(end), step});
}
Tensor t(const Tensor& self) { return call_t("aten::t", {self}); }
Tensor transpose(const Tensor& self, int64_t dim0, int64_t dim1) {
  return call_t("aten::transpose.int", {self, dim0, dim1});
}
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  return call_t("aten::cat", {tensors, dim});
}
Tensor zeros(const std::vector<int64_t>& size, DType dtype) {
  return call_t("aten::zeros", {size}, {{"dtype", dtype}});
}
Tensor full(const std::vector<int64_t>& size, double fill_value, DType dtype) {
  return call_t("aten::full", {size, fill_value}, {{"dtype", dtype}});
}

}  // namespace symmflow::aten
