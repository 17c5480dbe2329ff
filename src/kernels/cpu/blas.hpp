// The BLAS calls the cpu kernels share: gemv in f32 or f64 over row-major operands, and how many
// rows of a product go through it instead of gemm (Note [few rows by gemv] in matmul.cpp, Note
// [decode attention by gemv] in attention.cpp). Private to the cpu kernels.
#pragma once

#include <cblas.h>

#include <cstdint>
#include <type_traits>

namespace symmflow::cpu {

// OpenBLAS's gemm packs its B operand on every call: products of at most this many rows run one
// gemv per row, which reads B once, in place.
constexpr int64_t kGemvRows = 4;

// y = alpha * op(A) x + beta * y, A row-major [rows, cols] with row stride lda.
template <typename T>
void blas_gemv(CBLAS_TRANSPOSE trans, int64_t rows, int64_t cols, T alpha, const T* a,
               int64_t lda, const T* x, int64_t incx, T beta, T* y, int64_t incy) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemv(CblasRowMajor, trans, int(rows), int(cols), alpha, a, int(lda), x, int(incx),
                beta, y, int(incy));
  } else {
    cblas_dgemv(CblasRowMajor, trans, int(rows), int(cols), alpha, a, int(lda), x, int(incx),
                beta, y, int(incy));
  }
}

}  // namespace symmflow::cpu
