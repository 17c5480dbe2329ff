// Value: one argument or result of an op call (PyTorch's IValue, cut down to what schemas use).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "symmflow/core/dtype.hpp"
#include "symmflow/core/tensor.hpp"

namespace symmflow {

struct None {
  bool operator==(const None&) const = default;
};

class Value {
 public:
  using Variant = std::variant<None, bool, int64_t, double, std::string, std::vector<int64_t>,
                               std::vector<double>, DType, Tensor, std::vector<Tensor>>;
  Value() = default;
  Value(None) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(int64_t(i)) {}
  Value(int64_t i) : v_(i) {}
  Value(double d) : v_(d) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(std::vector<int64_t> l) : v_(std::move(l)) {}
  Value(std::initializer_list<int64_t> l) : v_(std::vector<int64_t>(l)) {}
  Value(std::vector<double> l) : v_(std::move(l)) {}
  Value(DType t) : v_(t) {}
  Value(Tensor t) : v_(std::move(t)) {}
  Value(std::vector<Tensor> l) : v_(std::move(l)) {}

  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_double() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_double() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_int_list() const { return std::holds_alternative<std::vector<int64_t>>(v_); }
  bool is_double_list() const { return std::holds_alternative<std::vector<double>>(v_); }
  bool is_dtype() const { return std::holds_alternative<DType>(v_); }
  bool is_tensor() const { return std::holds_alternative<Tensor>(v_); }
  bool is_tensor_list() const { return std::holds_alternative<std::vector<Tensor>>(v_); }

  // Accessors throw InvalidUsage naming the expected and actual kind.
  bool to_bool() const;
  int64_t to_int() const;
  double to_double() const;  // int and bool convert
  const std::string& to_string() const;
  const std::vector<int64_t>& to_int_list() const;
  const std::vector<double>& to_double_list() const;
  DType to_dtype() const;
  const Tensor& to_tensor() const;
  const std::vector<Tensor>& to_tensor_list() const;
  std::optional<int64_t> to_optional_int() const;
  std::optional<double> to_optional_double() const;
  std::optional<DType> to_optional_dtype() const;
  std::optional<Tensor> to_optional_tensor() const;

  // For a launch record's slots (Note [launch records] in exec/executable.cpp): `t` copied into
  // the tensor this Value holds (its shape and strides' capacity reused: no allocation when the
  // dims fit), and that tensor released again after the call (Tensor::release).
  void set_tensor(const Tensor& t);
  void release_tensor();

  const char* kind_name() const;  // "None", "int", "Tensor", ...
  std::string str() const;        // for diagnostics: "f32[2, 3]", "3", "'sum'"
  const Variant& variant() const { return v_; }

 private:
  Variant v_;
};

// Dtype and shape of one result, as a shape function reports it.
struct TensorSpec {
  DType dtype = DType::f32;
  Shape shape;
  bool operator==(const TensorSpec&) const = default;
};

}  // namespace symmflow
