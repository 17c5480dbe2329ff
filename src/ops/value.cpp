// Value accessors: each checks the held kind and names the expected and actual kinds on mismatch.
#include "symmflow/ops/value.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace symmflow {

namespace {
template <typename T>
const T& expect(const Value::Variant& v, const Value& self, const char* want) {
  if (const T* p = std::get_if<T>(&v)) return *p;
  invalid_usage("expected {} but got {} ({})", want, self.kind_name(), self.str());
}
}  // namespace

bool Value::to_bool() const { return expect<bool>(v_, *this, "bool"); }

int64_t Value::to_int() const {
  if (is_bool()) return std::get<bool>(v_) ? 1 : 0;
  return expect<int64_t>(v_, *this, "int");
}

double Value::to_double() const {
  if (is_int()) return double(std::get<int64_t>(v_));
  if (is_bool()) return std::get<bool>(v_) ? 1.0 : 0.0;
  return expect<double>(v_, *this, "float");
}

const std::string& Value::to_string() const { return expect<std::string>(v_, *this, "str"); }
const std::vector<int64_t>& Value::to_int_list() const {
  return expect<std::vector<int64_t>>(v_, *this, "int[]");
}
const std::vector<double>& Value::to_double_list() const {
  return expect<std::vector<double>>(v_, *this, "float[]");
}
DType Value::to_dtype() const { return expect<DType>(v_, *this, "ScalarType"); }
const Tensor& Value::to_tensor() const { return expect<Tensor>(v_, *this, "Tensor"); }

void Value::set_tensor(const Tensor& t) {
  if (Tensor* mine = std::get_if<Tensor>(&v_)) {
    *mine = t;
  } else {
    v_ = t;
  }
}

void Value::release_tensor() {
  if (Tensor* mine = std::get_if<Tensor>(&v_)) mine->release();
}
const std::vector<Tensor>& Value::to_tensor_list() const {
  return expect<std::vector<Tensor>>(v_, *this, "Tensor[]");
}

std::optional<int64_t> Value::to_optional_int() const {
  if (is_none()) return std::nullopt;
  return to_int();
}
std::optional<double> Value::to_optional_double() const {
  if (is_none()) return std::nullopt;
  return to_double();
}
std::optional<DType> Value::to_optional_dtype() const {
  if (is_none()) return std::nullopt;
  return to_dtype();
}
std::optional<Tensor> Value::to_optional_tensor() const {
  if (is_none()) return std::nullopt;
  return to_tensor();
}

const char* Value::kind_name() const {
  static constexpr const char* kNames[] = {"None",  "bool",      "int",    "float",  "str",
                                           "int[]", "float[]",   "ScalarType", "Tensor",
                                           "Tensor[]"};
  return kNames[v_.index()];
}

std::string Value::str() const {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, None>) return "None";
        else if constexpr (std::is_same_v<T, bool>) return x ? "True" : "False";
        else if constexpr (std::is_same_v<T, std::string>) return fmt::format("'{}'", x);
        else if constexpr (std::is_same_v<T, DType>) return std::string(dtype_name(x));
        else if constexpr (std::is_same_v<T, Tensor>) return x.str();
        else if constexpr (std::is_same_v<T, std::vector<Tensor>>) {
          std::vector<std::string> parts;
          for (const Tensor& t : x) parts.push_back(t.str());
          return fmt::format("[{}]", fmt::join(parts, ", "));
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                             std::is_same_v<T, std::vector<double>>) {
          return fmt::format("[{}]", fmt::join(x, ", "));
        } else {
          return fmt::format("{}", x);
        }
      },
      v_);
}

}  // namespace symmflow
