// Test support: tensors for tests, and comparing them.
//
// Guarantees: clone_tensor makes a contiguous host copy that shares no memory with `t`;
//   bitwise_equal compares dtype, shape and every byte of the contiguous values; make_input gives
//   deterministic values, small multiples of 1/4 (exact in every float dtype), different per
//   rank and seed; random_tensor gives uniform values in [lo, hi) for float dtypes (integers in
//   [-4, 4] otherwise) from a xorshift stream of `seed`, the same on every run; expect_same asserts (GoogleTest) equal dtype, shape and every element, naming
//   `what` and the first element that differs.
#pragma once

#include <cstdint>
#include <string>

#include "symmflow/core/tensor.hpp"

namespace symmflow::testing {

Tensor clone_tensor(const Tensor& t);

bool bitwise_equal(const Tensor& a, const Tensor& b);

Tensor make_input(const Shape& shape, DType dtype, int rank, int seed);

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double lo = -2, double hi = 2);

void expect_same(const Tensor& a, const Tensor& b, const std::string& what);

}  // namespace symmflow::testing
