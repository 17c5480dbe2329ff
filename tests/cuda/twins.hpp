// The same values in CPU and in GPU symmetric memory of "world", and the comparison of a GPU
// result with the CPU kernel's: shared by the GPU tests that run an op's cuda kernel beside its
// cpu kernel in the same rank threads (cuda_symm_ops_test.cpp, cuda_spanning_test.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "symmflow/ops/call.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/heap.hpp"

namespace symmflow::cuda {

struct Twin {
  Tensor cpu, gpu;
};
inline Twin symmetric(const Tensor& host) {
  Twin t{symmflow::empty_symmetric(host.shape(), host.dtype(), "world"),
         cuda::empty_symmetric(host.shape(), host.dtype(), "world")};
  call("aten::copy_", {t.cpu, host});
  call("aten::copy_", {t.gpu, host});
  return t;
}
inline Tensor gpu_empty(const Shape& shape, DType dtype) {
  return to_device(Tensor::zeros(shape, dtype));
}

// Every element of `gpu` against `cpu`: equal bits when tol is 0, else within tol relative.
inline void expect_same(const Tensor& gpu, const Tensor& cpu, double tol, const std::string& what) {
  Tensor got = to_host(gpu);
  ASSERT_EQ(got.shape(), cpu.shape()) << what;
  std::vector<double> a = got.to_doubles(), b = cpu.to_doubles();
  for (size_t i = 0; i < a.size(); ++i) {
    if (tol == 0) {
      ASSERT_EQ(a[i], b[i]) << what << " element " << i;
    } else {
      ASSERT_LE(std::abs(a[i] - b[i]), tol * std::max(1.0, std::abs(b[i])))
          << what << " element " << i;
    }
  }
}

// Within one rounding of a reduction's dtype (an average's division).
inline double one_rounding(DType d) {
  return d == DType::bf16 ? 8e-3 : d == DType::f16 ? 1e-3 : 2e-7;
}

}  // namespace symmflow::cuda
