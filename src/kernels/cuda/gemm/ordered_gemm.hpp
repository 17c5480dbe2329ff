// A GEMM whose every output element adds its k products in one order (k ascending), whatever the
// number of rows: deterministic mode's GEMM where the skinny kernel's rows cannot take the shape
// (f32, f64, or shapes it refuses; Note [skinny GEMM rows] in skinny_gemm.cu). CUDA cores, tiles
// of 16 x 16 in shared memory: slow beside cuBLAS (no tensor cores), but a row's bits do not
// depend on the other rows. Private to the cuda backend (matmul.cpp).
#pragma once

#include <cstdint>

namespace symmflow::cuda {

enum class GemmType { f32, f64, bf16, f16 };

// c[z][i][j] = alpha * sum over kk of a[z][i][kk] * b[z][kk][j] + beta * c[z][i][j] (c read only
// when beta != 0), for z < batch; every stride in elements; accumulation in float (double for
// f64), rounded once.
struct OrderedGemm {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t a_row = 0, a_col = 0, a_batch = 0;  // a[z][i][kk] at z * a_batch + i * a_row + kk * a_col
  int64_t b_row = 0, b_col = 0, b_batch = 0;  // b[z][kk][j] at z * b_batch + kk * b_row + j * b_col
  int64_t c_row = 0, c_batch = 0;             // c[z][i][j] at z * c_batch + i * c_row + j
  double alpha = 1, beta = 0;
  GemmType type = GemmType::f32;
};

// Enqueues it on `stream` (capturable); the cudaError_t of the launch.
int launch_ordered_gemm(const OrderedGemm& g, void* stream);

}  // namespace symmflow::cuda
