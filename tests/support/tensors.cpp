// Test support: tensors for tests (contract in tensors.hpp).
#include "support/tensors.hpp"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace symmflow::testing {

Tensor clone_tensor(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  Tensor src = t.contiguous();
  if (t.nbytes() > 0) std::memcpy(c.raw_data(), src.raw_data(), t.nbytes());
  return c;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return a.nbytes() == 0 || std::memcmp(x.raw_data(), y.raw_data(), a.nbytes()) == 0;
}

Tensor make_input(const Shape& shape, DType dtype, int rank, int seed) {
  Tensor t = Tensor::empty(shape, dtype);
  TensorView v = t.view();
  for (int64_t i = 0; i < t.numel(); ++i)
    store_double(v, i, double((i * 7 + rank * 13 + seed * 5) % 11 - 5) * 0.25);
  return t;
}

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  Tensor t = Tensor::empty(shape, dtype);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  TensorView v = t.view();
  for (int64_t i = 0; i < t.numel(); ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    double u = double(s >> 11) * 0x1.0p-53;
    store_double(v, i, is_floating(dtype) ? lo + (hi - lo) * u : double(int64_t(s % 9) - 4));
  }
  return t;
}

void expect_same(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << what << " element " << i;
}

}  // namespace symmflow::testing
