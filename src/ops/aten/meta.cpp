// Meta functions of the aten ops: type promotion, argument checks, pointwise, matmul, reductions
// and norms (views and shape ops live in meta_views.cpp). See meta.hpp for the contract.
#include "ops/aten/meta.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "symmflow/schema/schema.hpp"

namespace symmflow::aten_meta {

// ---- Type promotion -----------------------------------------------------------------------------

Operand operand_of(const Tensor& t) {
  return {t.dtype(), t.dim() == 0 ? OperandKind::zero_dim : OperandKind::dim};
}

Operand operand_of(const Value& v) {
  if (v.is_tensor()) return operand_of(v.to_tensor());
  if (v.is_bool()) return {DType::boolean, OperandKind::scalar};
  if (v.is_int()) return {DType::i64, OperandKind::scalar};
  if (v.is_double()) return {DType::f32, OperandKind::scalar};
  invalid_usage("expected a Tensor or a Scalar, got {}", v.kind_name());
}

namespace {

std::optional<DType> promote_opt(std::optional<DType> a, DType b) {
  return a ? promote_types(*a, b) : b;
}

// PyTorch's combine_categories: `higher` comes from the higher-priority operand class.
std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (is_floating(*higher)) return higher;
  if (*higher == DType::boolean || is_floating(*lower)) return promote_types(*higher, *lower);
  return higher;
}

}  // namespace

DType result_type(std::span<const Operand> operands) {
  std::optional<DType> dim, zero, scalar;
  for (const Operand& o : operands) {
    switch (o.kind) {
      case OperandKind::dim: dim = promote_opt(dim, o.dtype); break;
      case OperandKind::zero_dim: zero = promote_opt(zero, o.dtype); break;
      case OperandKind::scalar: scalar = promote_opt(scalar, o.dtype); break;
    }
  }
  return combine(dim, combine(zero, scalar)).value_or(DType::f32);
}

bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != DType::boolean && to == DType::boolean) return false;
  return true;
}

// ---- Argument helpers ---------------------------------------------------------------------------

std::optional<std::vector<int64_t>> opt_int_list(const Value& v) {
  if (v.is_none()) return std::nullopt;
  if (v.is_int()) return std::vector<int64_t>{v.to_int()};
  return v.to_int_list();
}

Shape factory_size(std::string_view op, const Value& size) {
  Shape shape = size.to_int_list();
  for (int64_t s : shape) {
    SF_CHECK(s >= 0, "{}: negative dimension {} in size {}", op, s, shape_str(shape));
  }
  return shape;
}

void check_out(std::string_view op, std::string_view arg, const Tensor& out, const TensorSpec& spec,
               bool exact_dtype) {
  SF_CHECK(out.defined(), "{}: {} is undefined", op, arg);
  SF_CHECK(out.shape() == spec.shape,
           "{}: {} has shape {} but the result has shape {} ({} is not resized)", op, arg,
           shape_str(out.shape()), shape_str(spec.shape), arg);
  if (exact_dtype) {
    SF_CHECK(out.dtype() == spec.dtype, "{}: {} has dtype {} but the result has dtype {}", op, arg,
             dtype_name(out.dtype()), dtype_name(spec.dtype));
  } else {
    SF_CHECK(can_cast(spec.dtype, out.dtype()),
             "{}: result type {} can't be cast to the dtype {} of {}", op, dtype_name(spec.dtype),
             dtype_name(out.dtype()), arg);
  }
}

void check_dtype(bool ok, std::string_view op, std::string_view arg, DType dtype,
                 std::string_view expected) {
  SF_CHECK(ok, "{}: {} has dtype {}, which is not supported (expected {})", op, arg,
           dtype_name(dtype), expected);
}

// ---- Pointwise ----------------------------------------------------------------------------------

const char* unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::sin: return "sin";
    case UnaryOp::cos: return "cos";
    case UnaryOp::exp: return "exp";
    case UnaryOp::tanh: return "tanh";
    case UnaryOp::relu: return "relu";
    case UnaryOp::gelu: return "gelu";
    case UnaryOp::silu: return "silu";
    case UnaryOp::sigmoid: return "sigmoid";
    case UnaryOp::neg: return "neg";
    case UnaryOp::rsqrt: return "rsqrt";
    case UnaryOp::reciprocal: return "reciprocal";
  }
  return "?";
}

TensorSpec binary_spec(std::string_view op, BinaryOp kind, const Tensor& self, const Value& other,
                       const Value& alpha) {
  SF_CHECK(other.is_tensor() || other.is_number(), "{}: other must be a Tensor or a Scalar, got {}",
           op, other.kind_name());
  Shape shape = self.shape();
  if (other.is_tensor()) {
    const Tensor& o = other.to_tensor();
    SF_CHECK(o.defined(), "{}: other is undefined", op);
    Shape a = self.shape(), b = o.shape();
    size_t n = std::max(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
      int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
      int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
      SF_CHECK(da == db || da == 1 || db == 1,
               "{}: self with shape {} and other with shape {} do not broadcast (dimension {}: {} vs "
               "{})",
               op, shape_str(a), shape_str(b), i, da, db);
    }
    shape = broadcast_shapes(a, b);
  }
  Operand operands[] = {operand_of(self), operand_of(other)};
  DType dtype = result_type(operands);
  DType other_dtype = operands[1].dtype;
  if (kind == BinaryOp::sub) {
    SF_CHECK(self.dtype() != DType::boolean && other_dtype != DType::boolean,
             "{}: subtraction with a bool tensor or scalar is not supported; use logical_xor or "
             "logical_not instead",
             op);
  }
  if (kind == BinaryOp::div && !is_floating(dtype)) dtype = DType::f32;  // true division
  if ((kind == BinaryOp::add || kind == BinaryOp::sub) && !alpha.is_none()) {
    SF_CHECK(alpha.is_number(), "{}: alpha must be a Scalar, got {}", op, alpha.kind_name());
    SF_CHECK(!alpha.is_bool() || dtype == DType::boolean,
             "{}: a boolean alpha is only supported for bool results, not {}", op,
             dtype_name(dtype));
    SF_CHECK(is_floating(dtype) || !alpha.is_double(),
             "{}: for integral input tensors, argument alpha must not be a floating point number "
             "(got {})",
             op, alpha.to_double());
  }
  return {dtype, shape};
}

TensorSpec unary_spec(std::string_view op, UnaryOp kind, const Tensor& self) {
  DType t = self.dtype();
  switch (kind) {
    case UnaryOp::sin:
    case UnaryOp::cos:
    case UnaryOp::exp:
    case UnaryOp::tanh:
    case UnaryOp::sigmoid:
    case UnaryOp::rsqrt:
    case UnaryOp::reciprocal:
      return {is_floating(t) ? t : DType::f32, self.shape()};  // ints and bool compute in f32
    case UnaryOp::gelu:
    case UnaryOp::silu:
      check_dtype(is_floating(t), op, "self", t, "f32, f64, bf16 or f16");
      return {t, self.shape()};
    case UnaryOp::relu:
      check_dtype(t != DType::boolean, op, "self", t, "a floating or integer dtype");
      return {t, self.shape()};
    case UnaryOp::neg:
      SF_CHECK(t != DType::boolean,
               "{}: negation of a bool tensor is not supported; use logical_not instead", op);
      return {t, self.shape()};
  }
  return {t, self.shape()};
}

TensorSpec pow_scalar_spec(std::string_view op, const Tensor& self, const Value& exponent) {
  SF_CHECK(exponent.is_number(), "{}: exponent must be a Scalar, got {}", op, exponent.kind_name());
  Operand operands[] = {operand_of(self), operand_of(exponent)};
  DType dtype = result_type(operands);
  check_dtype(is_floating(dtype), op, "self", self.dtype(),
              "a floating dtype, or a floating exponent (integral powers have no kernel)");
  return {dtype, self.shape()};
}

bool gelu_is_tanh(std::string_view op, const Value& approximate) {
  const std::string& a = approximate.to_string();
  SF_CHECK(a == "none" || a == "tanh", "{}: approximate must be 'none' or 'tanh', got '{}'", op, a);
  return a == "tanh";
}

// ---- Matmul -------------------------------------------------------------------------------------

namespace {

void check_matmul_dtype(std::string_view op, const char* a_name, const Tensor& a,
                        const char* b_name, const Tensor& b) {
  SF_CHECK(a.dtype() == b.dtype(), "{}: {} has dtype {} and {} has dtype {}; expected the same dtype",
           op, a_name, dtype_name(a.dtype()), b_name, dtype_name(b.dtype()));
  check_dtype(a.dtype() != DType::boolean, op, a_name, a.dtype(),
              "a floating or integer dtype");
}

void check_rank(std::string_view op, const char* name, const Tensor& t, int64_t rank,
                const char* what) {
  SF_CHECK(t.dim() == rank, "{}: {} must be {} ({}-D), got shape {}", op, name, what, rank,
           shape_str(t.shape()));
}

void check_scalar_for(std::string_view op, const char* name, const Value& v, DType dtype) {
  SF_CHECK(v.is_number(), "{}: {} must be a Scalar, got {}", op, name, v.kind_name());
  SF_CHECK(is_floating(dtype) || !v.is_double(),
           "{}: for integral input tensors, argument {} must not be a floating point number", op,
           name);
}

}  // namespace

TensorSpec mm_spec(std::string_view op, const Tensor& self, const Tensor& mat2) {
  check_rank(op, "self", self, 2, "a matrix");
  check_rank(op, "mat2", mat2, 2, "a matrix");
  SF_CHECK(self.size(1) == mat2.size(0),
           "{}: self has shape {} and mat2 has shape {}; inner dimensions {} and {} differ", op,
           shape_str(self.shape()), shape_str(mat2.shape()), self.size(1), mat2.size(0));
  check_matmul_dtype(op, "self", self, "mat2", mat2);
  return {self.dtype(), {self.size(0), mat2.size(1)}};
}

TensorSpec addmm_spec(std::string_view op, const Tensor& self, const Tensor& mat1,
                      const Tensor& mat2, const Value& beta, const Value& alpha) {
  check_rank(op, "mat1", mat1, 2, "a matrix");
  check_rank(op, "mat2", mat2, 2, "a matrix");
  SF_CHECK(mat1.size(1) == mat2.size(0),
           "{}: mat1 has shape {} and mat2 has shape {}; inner dimensions {} and {} differ", op,
           shape_str(mat1.shape()), shape_str(mat2.shape()), mat1.size(1), mat2.size(0));
  check_matmul_dtype(op, "mat1", mat1, "mat2", mat2);
  check_matmul_dtype(op, "self", self, "mat1", mat1);
  Shape shape = {mat1.size(0), mat2.size(1)};
  SF_CHECK(self.dim() <= 2, "{}: self must have at most 2 dimensions, got shape {}", op,
           shape_str(self.shape()));
  Shape s = self.shape();
  bool ok = true;
  for (size_t i = 0; i < s.size(); ++i) {
    int64_t want = shape[i + 2 - s.size()];
    ok = ok && (s[i] == want || s[i] == 1);
  }
  SF_CHECK(ok, "{}: self with shape {} does not broadcast to the product's shape {}", op,
           shape_str(s), shape_str(shape));
  check_scalar_for(op, "beta", beta, self.dtype());
  check_scalar_for(op, "alpha", alpha, self.dtype());
  return {self.dtype(), shape};
}

TensorSpec bmm_spec(std::string_view op, const Tensor& self, const Tensor& mat2) {
  check_rank(op, "self", self, 3, "a batch of matrices");
  check_rank(op, "mat2", mat2, 3, "a batch of matrices");
  SF_CHECK(self.size(0) == mat2.size(0),
           "{}: self has shape {} and mat2 has shape {}; batch sizes {} and {} differ", op,
           shape_str(self.shape()), shape_str(mat2.shape()), self.size(0), mat2.size(0));
  SF_CHECK(self.size(2) == mat2.size(1),
           "{}: self has shape {} and mat2 has shape {}; inner dimensions {} and {} differ", op,
           shape_str(self.shape()), shape_str(mat2.shape()), self.size(2), mat2.size(1));
  check_matmul_dtype(op, "self", self, "mat2", mat2);
  return {self.dtype(), {self.size(0), self.size(1), mat2.size(2)}};
}

// ---- Reductions and norms -----------------------------------------------------------------------

ReduceInfo reduce_info(std::string_view op, const Tensor& self, const Value& dim,
                       const Value& keepdim, const Value& dtype, bool is_mean) {
  ReduceInfo info;
  int64_t rank = self.dim();
  info.reduced.assign(size_t(rank), false);
  std::optional<std::vector<int64_t>> dims = opt_int_list(dim);
  if (!dims || dims->empty()) {
    info.reduced.assign(size_t(rank), true);
  } else {
    for (int64_t d : *dims) {
      int64_t w = wrap_dim(d, rank, "dim");
      if (rank == 0) continue;
      SF_CHECK(!info.reduced[size_t(w)], "{}: dim {} appears multiple times in the list of dims",
               op, w);
      info.reduced[size_t(w)] = true;
    }
  }
  bool keep = keepdim.to_bool();
  for (int64_t d = 0; d < rank; ++d) {
    int64_t size = self.shape()[size_t(d)];
    if (info.reduced[size_t(d)]) {
      info.count *= size;
      info.keepdim_shape.push_back(1);
      if (keep) info.spec.shape.push_back(1);
    } else {
      info.keepdim_shape.push_back(size);
      info.spec.shape.push_back(size);
    }
  }
  std::optional<DType> requested = dtype.to_optional_dtype();
  DType t = self.dtype();
  if (requested) {
    info.spec.dtype = *requested;
  } else if (is_mean) {
    info.spec.dtype = t;
  } else {
    info.spec.dtype = is_floating(t) ? t : DType::i64;
  }
  if (is_mean) {
    SF_CHECK(is_floating(info.spec.dtype),
             "{}: could not infer output dtype; self has dtype {} and mean needs a floating dtype "
             "(pass dtype=)",
             op, dtype_name(info.spec.dtype));
  }
  return info;
}

ReduceInfo amax_info(std::string_view op, const Tensor& self, const Value& dim,
                     const Value& keepdim) {
  check_dtype(self.dtype() != DType::boolean, op, "self", self.dtype(),
              "a floating or integer dtype");
  ReduceInfo info = reduce_info(op, self, dim, keepdim, Value(), /*is_mean=*/false);
  info.spec.dtype = self.dtype();
  for (size_t d = 0; d < info.reduced.size(); ++d) {
    SF_CHECK(!info.reduced[d] || self.shape()[d] != 0,
             "{}: expected reduction dim {} to have non-zero size", op, d);
  }
  SF_CHECK(self.dim() > 0 || self.numel() > 0, "{}: expected a non-empty input", op);
  return info;
}

RmsNormInfo rms_norm_info(std::string_view op, const Tensor& input, const Value& normalized_shape,
                          const Value& weight, const Value& eps) {
  RmsNormInfo info;
  check_dtype(is_floating(input.dtype()), op, "input", input.dtype(), "f32, f64, bf16 or f16");
  Shape ns = normalized_shape.to_int_list();
  SF_CHECK(!ns.empty(), "{}: normalized_shape must not be empty", op);
  const Shape& s = input.shape();
  bool match = ns.size() <= s.size() && std::equal(ns.begin(), ns.end(), s.end() - ptrdiff_t(ns.size()));
  SF_CHECK(match, "{}: normalized_shape {} does not match the last dimensions of input with shape {}",
           op, shape_str(ns), shape_str(s));
  info.inner = numel(ns);
  info.spec = {input.dtype(), s};
  if (std::optional<Tensor> w = weight.to_optional_tensor()) {
    SF_CHECK(w->shape() == ns, "{}: weight has shape {} but normalized_shape is {}", op,
             shape_str(w->shape()), shape_str(ns));
    check_dtype(is_floating(w->dtype()), op, "weight", w->dtype(), "f32, f64, bf16 or f16");
    info.spec.dtype = promote_types(input.dtype(), w->dtype());
  }
  if (std::optional<double> e = eps.to_optional_double()) {
    info.eps = *e;
  } else {
    info.eps = input.dtype() == DType::f64 ? std::numeric_limits<double>::epsilon()
                                           : double(std::numeric_limits<float>::epsilon());
  }
  return info;
}

SoftmaxInfo softmax_info(std::string_view op, const Tensor& self, const Value& dim,
                         const Value& half_to_float) {
  SoftmaxInfo info;
  DType t = self.dtype();
  check_dtype(is_floating(t), op, "self", t, "f32, f64, bf16 or f16");
  info.dim = wrap_dim(dim.to_int(), self.dim(), "dim");
  info.spec = {t, self.shape()};
  info.n = self.dim() == 0 ? 1 : self.size(info.dim);
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (d < info.dim) info.outer *= self.size(d);
    if (d > info.dim) info.inner *= self.size(d);
  }
  if (half_to_float.to_bool()) {
    SF_CHECK(t == DType::f16 || t == DType::bf16,
             "{}: half_to_float is only supported for f16 and bf16 inputs, not {}", op,
             dtype_name(t));
    info.spec.dtype = DType::f32;
  }
  return info;
}

// ---- Definition helper --------------------------------------------------------------------------

const Value& Args::operator[](std::string_view name) const {
  for (size_t i = 0; i < names_.size() && i < values_.size(); ++i) {
    if (names_[i] == name) return values_[i];
  }
  throw_error(ErrorCode::Internal, "{}: no bound argument '{}'", op_, name);
}

void def(Library& m, std::string_view schema, MetaFn fn) {
  FunctionSchema parsed = parse_schema(schema);
  std::vector<std::string> names;
  for (const Argument& a : parsed.args) names.push_back(a.name);
  std::string op = fmt::format("{}::{}", m.ns(), parsed.name);
  if (!parsed.overload.empty()) op += "." + parsed.overload;
  m.def(schema, [op, names = std::move(names), fn = std::move(fn)](std::span<const Value> args) {
    return fn(Args(op, names, args));
  });
}

}  // namespace symmflow::aten_meta
