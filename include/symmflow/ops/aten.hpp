// Typed C++ entry points for common aten ops. Each one is a thin call through the registry
// (symmflow::call with the op's full overload name), so it dispatches, validates and promotes
// exactly like `call("aten::...", ...)` and a compiled graph would.
//
//   Tensor y = aten::add(aten::mm(x, w), b);
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "symmflow/core/tensor.hpp"

namespace symmflow::aten {

// Binary ops broadcast and promote like PyTorch. alpha scales `other` (an integral alpha is passed
// as an int, so it works with integer tensors).
Tensor add(const Tensor& self, const Tensor& other, double alpha = 1);
Tensor add(const Tensor& self, double other, double alpha = 1);
Tensor sub(const Tensor& self, const Tensor& other, double alpha = 1);
Tensor sub(const Tensor& self, double other, double alpha = 1);
Tensor mul(const Tensor& self, const Tensor& other);
Tensor mul(const Tensor& self, double other);
Tensor div(const Tensor& self, const Tensor& other);
Tensor div(const Tensor& self, double other);

Tensor mm(const Tensor& self, const Tensor& mat2);
Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2, double beta = 1,
             double alpha = 1);
Tensor bmm(const Tensor& self, const Tensor& mat2);

Tensor sin(const Tensor& self);
Tensor cos(const Tensor& self);
Tensor exp(const Tensor& self);
Tensor tanh(const Tensor& self);
Tensor relu(const Tensor& self);
Tensor gelu(const Tensor& self, const std::string& approximate = "none");
Tensor silu(const Tensor& self);
Tensor sigmoid(const Tensor& self);
Tensor neg(const Tensor& self);

Tensor rms_norm(const Tensor& input, const std::vector<int64_t>& normalized_shape,
                const std::optional<Tensor>& weight = std::nullopt,
                std::optional<double> eps = std::nullopt);
// aten::_softmax(self, dim, half_to_float=false).
Tensor softmax(const Tensor& self, int64_t dim);
// Reduces over `dim` (every dim when empty); integral inputs sum to i64 unless `dtype` is given.
Tensor sum(const Tensor& self, const std::vector<int64_t>& dim = {}, bool keepdim = false,
           std::optional<DType> dtype = std::nullopt);
Tensor mean(const Tensor& self, const std::vector<int64_t>& dim = {}, bool keepdim = false,
            std::optional<DType> dtype = std::nullopt);

Tensor clone(const Tensor& self);
// Copies src (broadcast, converted) into self; returns self.
const Tensor& copy_(const Tensor& self, const Tensor& src);
Tensor view(const Tensor& self, const std::vector<int64_t>& size);
Tensor reshape(const Tensor& self, const std::vector<int64_t>& shape);
Tensor slice(const Tensor& self, int64_t dim = 0, std::optional<int64_t> start = std::nullopt,
             std::optional<int64_t> end = std::nullopt, int64_t step = 1);
Tensor t(const Tensor& self);
Tensor transpose(const Tensor& self, int64_t dim0, int64_t dim1);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor zeros(const std::vector<int64_t>& size, DType dtype = DType::f32);
Tensor full(const std::vector<int64_t>& size, double fill_value, DType dtype = DType::f32);

}  // namespace symmflow::aten
