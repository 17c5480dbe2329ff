// CPU kernels of aten::mm, addmm, bmm (and their out / in-place variants), sharing one matrix
// product routine: C = beta * C + alpha * A @ B on 2-D strided operands.
//  - f32/f64 go through OpenBLAS cblas_sgemm/cblas_dgemm. A 2-D operand with unit stride in either
//    dim is passed as is with the matching transpose flag and leading dimension; other layouts are
//    copied contiguous first. C must have unit column stride (a temporary otherwise). Up to 4
//    rows of A, or one column of B, go through gemv (Note [few rows by gemv]).
//  - bf16/f16 are converted to contiguous f32 buffers, multiplied in f32, converted back.
//  - integers use a plain loop with a wrapping 64-bit accumulator.
// k == 0 gives beta * C (zeros for mm/bmm); BLAS is never called with an empty dimension.
// With SYMMFLOW_DETERMINISTIC=1, f32/f64 (and so 16-bit) products use a fixed order instead of
// BLAS, the same for every row whatever the row count (Note [batch-invariant products]).
// Before a product on a rank, OpenBLAS's threads are fitted to the rank's share of the host's CPUs
// (Note [BLAS threads per rank]).
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <mutex>

#include "kernels/cpu/blas.hpp"
#include "kernels/cpu/common.hpp"
#include "kernels/families.hpp"
#include "ops/aten/meta.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/runtime/tunables.hpp"

// OpenBLAS's, when the BLAS is OpenBLAS (null otherwise: another BLAS keeps its own threads).
extern "C" void openblas_set_num_threads(int threads) __attribute__((weak));

namespace symmflow::cpu {
namespace {

// Note [BLAS threads per rank]
// OpenBLAS runs each product on a pool of its own, one thread per CPU by default. The ranks of a
// host (rank threads of the threads transport, or processes) multiplying at once then put ranks x
// CPUs threads on the CPUs, which wait on each other. So before a product on a rank, OpenBLAS's
// threads are set to the host's usable CPUs / its ranks (at least 1): examples/tp_mlp.sf at 2
// thread ranks on 2 CPUs (`symmflow run --ranks 2 --iters 20`, three runs each) took 206-224 ms
// a run before, 169-180 after (882-935 against 346-358 while the machine was also building). The
// setting is the process's, and the rank threads of one process all want the same: the first
// product sets it under the lock, which every rank's first product takes, so no product of the
// world runs while it changes. OPENBLAS_NUM_THREADS or OMP_NUM_THREADS in the environment keeps
// the user's choice; outside a rank and at one rank per host nothing changes.
void fit_blas_threads() {
  static const bool user_choice =
      std::getenv("OPENBLAS_NUM_THREADS") != nullptr || std::getenv("OMP_NUM_THREADS") != nullptr;
  static std::atomic<int> set{0};
  if (user_choice || !openblas_set_num_threads) return;
  Runtime* rt = Runtime::current_or_null();
  if (!rt) return;
  const Bootstrap& b = rt->bootstrap();
  if (b.local_ranks() <= 1) return;
  const int want = std::max(1, b.local_cpus() / b.local_ranks());
  if (set.load(std::memory_order_acquire) == want) return;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (set.load(std::memory_order_relaxed) == want) return;
  openblas_set_num_threads(want);
  set.store(want, std::memory_order_release);
}

// One BLAS operand: pointer, transpose flag and leading dimension, or a contiguous copy.
template <typename T>
struct GemmOperand {
  const T* data = nullptr;
  CBLAS_TRANSPOSE trans = CblasNoTrans;
  int ld = 1;
  std::vector<T> copy;

  GemmOperand(const T* p, int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
    auto fits = [](int64_t v) { return v <= INT_MAX; };
    if ((cols == 1 || s1 == 1) && (rows == 1 || s0 >= std::max<int64_t>(cols, 1)) &&
        fits(rows == 1 ? cols : s0)) {
      data = p;
      ld = int(rows == 1 ? std::max<int64_t>(cols, 1) : s0);
    } else if ((rows == 1 || s0 == 1) && (cols == 1 || s1 >= std::max<int64_t>(rows, 1)) &&
               fits(cols == 1 ? rows : s1)) {
      data = p;
      trans = CblasTrans;
      ld = int(cols == 1 ? std::max<int64_t>(rows, 1) : s1);
    } else {
      copy.resize(size_t(rows * cols));
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) copy[size_t(i * cols + j)] = p[i * s0 + j * s1];
      }
      data = copy.data();
      ld = int(std::max<int64_t>(cols, 1));
    }
  }
};

// Note [batch-invariant products]
// With SYMMFLOW_DETERMINISTIC=1 a row of a product must not depend on how many rows are
// multiplied with it, nor where it sits among them: a sequence decoded alone and in a batch of 8
// must get the same bits (issue 37 item 4). OpenBLAS does not promise that: on this project's
// machines cblas_sgemm gave another first row for 1 to 3 rows (its gemv and small-matrix paths)
// than for 4 and more (2026-11-29), and a decode step multiplies one row per sequence. So
// deterministic mode computes every f32 and f64 product (and the 16-bit ones, which are
// multiplied in f32) in one fixed order of its own: k in panels of kKc from the first; within a
// panel each element sums a[i, p] * b[p, j] over p ascending from zero in the accumulation type,
// and the panel's sum is added to the element's running total (zero before the first panel);
// then alpha and beta. Every row goes through the same register-tile loop (kMr rows by kNr
// columns; rows past the matrix are packed as zeros, never a separate edge loop), so whatever the
// compiler makes of that loop (vectors) it makes for every row; the file is compiled without
// contracting multiplies and adds into FMAs, so B read in place (few rows) or packed gives the
// same bits.
// The collectives need nothing: every CPU reduction adds in rank order whatever its algorithm
// (DESIGN.md), so they are batch-invariant already.
constexpr int64_t kKc = 64;
constexpr int kMr = 4, kNr = 8;
constexpr int64_t kInPlaceRows = 16;  // at most this many rows read B in place

// One kMr x kNr register tile over a panel of kc values of k: tile[r][q] = sum over p ascending
// of ap[p][r] * B(p, q), B(p, q) = bp[p * ps + q * qs] (a packed panel, or B read in place).
template <typename T>
void tile_product(const T (*ap)[kMr], const T* bp, int64_t ps, int64_t qs, int64_t kc,
                  T (&tile)[kMr][kNr]) {
  for (int64_t p = 0; p < kc; ++p) {
    for (int r = 0; r < kMr; ++r) {
      const T av = ap[p][r];
      for (int q = 0; q < kNr; ++q) tile[r][q] += av * bp[p * ps + q * qs];
    }
  }
}

template <typename T>
void fixed_order_gemm(int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t a0,
                      int64_t a1, const T* b, int64_t b0, int64_t b1, T beta, T* c, int64_t ldc) {
  const int64_t full = n / kNr, nb = (n + kNr - 1) / kNr;  // column tiles, full ones first
  // Few rows (a decode step): B with a unit stride (row-major, or a linear layer's transposed
  // weight) is read in place for the full tiles rather than packed for a single use; otherwise,
  // and for a short last tile, B is packed (zeros past n). Both loops are the same multiplies and
  // adds in the same order (no contraction: src/CMakeLists.txt), so the choice, which depends on
  // the rows, changes no bit.
  const bool in_place = m <= kInPlaceRows && (b1 == 1 || b0 == 1);
  std::vector<T> total(static_cast<size_t>(m * n), T(0));
  std::vector<T> bpack(static_cast<size_t>(nb * kKc * kNr));  // [tile][p][kNr]
  T apack[kKc][kMr];
  for (int64_t p0 = 0; p0 < k; p0 += kKc) {
    const int64_t kc = std::min(kKc, k - p0);
    for (int64_t t = in_place ? full : 0; t < nb; ++t) {
      for (int64_t p = 0; p < kc; ++p) {
        T* dst = bpack.data() + (t * kKc + p) * kNr;
        for (int q = 0; q < kNr; ++q) {
          const int64_t j = t * kNr + q;
          dst[q] = j < n ? b[(p0 + p) * b0 + j * b1] : T(0);
        }
      }
    }
    for (int64_t i0 = 0; i0 < m; i0 += kMr) {
      const int rows = int(std::min<int64_t>(kMr, m - i0));
      for (int64_t p = 0; p < kc; ++p) {
        for (int r = 0; r < kMr; ++r)
          apack[p][r] = r < rows ? a[(i0 + r) * a0 + (p0 + p) * a1] : T(0);
      }
      for (int64_t t = 0; t < nb; ++t) {
        T tile[kMr][kNr] = {};
        if (in_place && t < full) {
          tile_product<T>(apack, b + p0 * b0 + t * kNr * b1, b0, b1, kc, tile);
        } else {
          tile_product<T>(apack, bpack.data() + t * kKc * kNr, kNr, 1, kc, tile);
        }
        const int cols = int(std::min<int64_t>(kNr, n - t * kNr));
        for (int r = 0; r < rows; ++r) {
          T* out = total.data() + (i0 + r) * n + t * kNr;
          for (int q = 0; q < cols; ++q) out[q] += tile[r][q];
        }
      }
    }
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const T v = alpha * total[static_cast<size_t>(i * n + j)];
      c[i * ldc + j] = beta == T(0) ? v : beta * c[i * ldc + j] + v;
    }
  }
}

// Note [few rows by gemv]
// OpenBLAS's gemm packs B into panels on every call, whatever the row count of A; Debian's 0.3.21
// (the one CI installs) forwards no small case to gemv. A decode step multiplies one row per
// sequence by every weight: on this project's 2-CPU machine, [1, 512] x [512, 1792]^T took 250 us
// by cblas_sgemm (2 to 8 rows: 283-389 us) against 51 us by cblas_sgemv (2026-11-29, OpenBLAS
// 0.3.21 SkylakeX, 2 threads), which reads the weight once, in place. So up to kGemvRows rows are
// multiplied one row at a time by gemv (the weight re-read each row: 4 rows ~200 us, still below
// gemm; kGemvRows in blas.hpp), and a one-column B likewise. Returns false (gemm runs) where an operand was copied, or
// a row or column stride is 0 or too large for BLAS.
template <typename T>
bool few_rows_by_gemv(int64_t m, int64_t n, int64_t k, T alpha, const GemmOperand<T>& ga,
                      const GemmOperand<T>& gb, T beta, T* c, int64_t ldc) {
  auto fits = [](int64_t v) { return v > 0 && v <= INT_MAX; };
  if (m <= kGemvRows && gb.copy.empty()) {
    // Row i of C = alpha * B^T a_i + beta * C_i; B is k x n (NoTrans) or stored n x k (Trans).
    // Row i of A, element p: ga.data[i * ld + p] (NoTrans) or ga.data[p * ld + i] (Trans).
    const int64_t step = ga.trans == CblasNoTrans ? 1 : ga.ld;
    const int64_t row = ga.trans == CblasNoTrans ? ga.ld : 1;
    if (!fits(step)) return false;
    for (int64_t i = 0; i < m; ++i) {
      const T* x = ga.data + i * row;
      if (gb.trans == CblasNoTrans)
        blas_gemv<T>(CblasTrans, k, n, alpha, gb.data, gb.ld, x, step, beta, c + i * ldc, 1);
      else
        blas_gemv<T>(CblasNoTrans, n, k, alpha, gb.data, gb.ld, x, step, beta, c + i * ldc, 1);
    }
    return true;
  }
  if (n == 1 && ga.copy.empty() && gb.copy.empty() && fits(ldc)) {
    // C[:, 0] = alpha * A b + beta * C[:, 0]; b's element p: gb.data[p * ld] (NoTrans) or [p].
    const int64_t step = gb.trans == CblasNoTrans ? gb.ld : 1;
    if (!fits(step)) return false;
    if (ga.trans == CblasNoTrans)
      blas_gemv<T>(CblasNoTrans, m, k, alpha, ga.data, ga.ld, gb.data, step, beta, c, ldc);
    else
      blas_gemv<T>(CblasTrans, k, m, alpha, ga.data, ga.ld, gb.data, step, beta, c, ldc);
    return true;
  }
  return false;
}

// C[m, n] (unit column stride, row stride ldc) = beta * C + alpha * A[m, k] @ B[k, n].
template <typename T>
void blas_gemm(int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t a0, int64_t a1,
               const T* b, int64_t b0, int64_t b1, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    }
    return;
  }
  if (tunables().deterministic) {  // Note [batch-invariant products]
    fixed_order_gemm<T>(m, n, k, alpha, a, a0, a1, b, b0, b1, beta, c, ldc);
    return;
  }
  SF_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && ldc <= INT_MAX,
           "matrix product of [{}, {}] x [{}, {}] is too large for BLAS", m, k, k, n);
  GemmOperand<T> ga(a, m, k, a0, a1);
  GemmOperand<T> gb(b, k, n, b0, b1);
  fit_blas_threads();
  if (few_rows_by_gemv<T>(m, n, k, alpha, ga, gb, beta, c, ldc)) return;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ga.trans, gb.trans, int(m), int(n), int(k), alpha, ga.data, ga.ld,
                gb.data, gb.ld, beta, c, int(std::max<int64_t>(ldc, n)));
  } else {
    cblas_dgemm(CblasRowMajor, ga.trans, gb.trans, int(m), int(n), int(k), alpha, ga.data, ga.ld,
                gb.data, gb.ld, beta, c, int(std::max<int64_t>(ldc, n)));
  }
}

template <typename T>
void int_gemm(int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t a0, int64_t a1,
              const T* b, int64_t b0, int64_t b1, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      uint64_t acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        acc += uint64_t(int64_t(a[i * a0 + p * a1])) * uint64_t(int64_t(b[p * b0 + j * b1]));
      }
      uint64_t prev = beta == T(0) ? 0 : uint64_t(int64_t(beta)) * uint64_t(int64_t(c[i * ldc + j]));
      c[i * ldc + j] = T(prev + uint64_t(int64_t(alpha)) * acc);
    }
  }
}

// The matrices of one product: batch b of a 2-D (batch 1) or 3-D tensor.
struct Mat {
  const Tensor* t;
  int64_t s0() const { return t->strides()[t->strides().size() - 2]; }
  int64_t s1() const { return t->strides().back(); }
  int64_t batch_stride() const { return t->dim() == 3 ? t->strides()[0] : 0; }
};

// c (dtype T, contiguous, [batch,] m x n) = beta * c + alpha * a @ b for every batch. For f32 and
// f64, a and b may be strided; for integers too. c already holds the scaled-in bias when beta != 0.
template <typename T>
void batched_gemm(const Tensor& a, const Tensor& b, const Tensor& c, T alpha, T beta) {
  int64_t batch = a.dim() == 3 ? a.size(0) : 1;
  int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  Mat ma{&a}, mb{&b};
  const T* ap = static_cast<const T*>(a.raw_data());
  const T* bp = static_cast<const T*>(b.raw_data());
  T* cp = static_cast<T*>(c.raw_data());
  for (int64_t i = 0; i < batch; ++i) {
    const T* ai = ap + i * ma.batch_stride();
    const T* bi = bp + i * mb.batch_stride();
    T* ci = cp + i * m * n;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      blas_gemm<T>(m, n, k, alpha, ai, ma.s0(), ma.s1(), bi, mb.s0(), mb.s1(), beta, ci, n);
    } else {
      int_gemm<T>(m, n, k, alpha, ai, ma.s0(), ma.s1(), bi, mb.s0(), mb.s1(), beta, ci, n);
    }
  }
}

// dst = beta * bias + alpha * a @ b (bias undefined: beta ignored). dst has the result shape and
// the operands' dtype; it may be strided.
void matmul_into(const Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& bias,
                 const Value& beta_v, const Value& alpha_v) {
  DType dtype = a.dtype();
  bool half = dtype == DType::f16 || dtype == DType::bf16;
  DType compute = half ? DType::f32 : dtype;
  Destination d(dst, compute, /*need_contiguous=*/true);
  const Tensor& c = d.tensor();
  visit_dtype(compute, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool> || kIsHalf<T>) {
      throw_error(ErrorCode::Internal, "matmul: unexpected compute dtype {}", dtype_name(compute));
    } else {
      T alpha = alpha_v.is_none() ? T(1) : scalar_as<T>(alpha_v);
      T beta = T(0);
      if (bias.defined() && !beta_v.is_none()) beta = scalar_as<T>(beta_v);
      if (beta != T(0)) {
        copy_into(c, bias);  // broadcast to [m, n]
      }
      Tensor a2 = a, b2 = b;
      if (half) {
        a2 = scratch_tensor(a.shape(), DType::f32, 0);
        copy_into(a2, a);
        b2 = scratch_tensor(b.shape(), DType::f32, 1);
        copy_into(b2, b);
      }
      batched_gemm<T>(a2, b2, c, alpha, beta);
    }
  });
  d.finish();
}

Kernel mm_kernel(bool batched, const char* written) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const Tensor& self = call.arg("self").to_tensor();
    const Tensor& mat2 = call.arg("mat2").to_tensor();
    TensorSpec spec =
        batched ? aten_meta::bmm_spec(op, self, mat2) : aten_meta::mm_spec(op, self, mat2);
    const Tensor& dst = *written ? call.arg(written).to_tensor() : call.out(0);
    if (*written) aten_meta::check_out(op, written, dst, spec, /*exact_dtype=*/true);
    matmul_into(dst, self, mat2, Tensor(), Value(), Value());
  };
}

Kernel addmm_kernel(const char* written) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const Tensor& self = call.arg("self").to_tensor();
    const Tensor& mat1 = call.arg("mat1").to_tensor();
    const Tensor& mat2 = call.arg("mat2").to_tensor();
    TensorSpec spec =
        aten_meta::addmm_spec(op, self, mat1, mat2, call.arg("beta"), call.arg("alpha"));
    const Tensor& dst = *written ? call.arg(written).to_tensor() : call.out(0);
    if (*written) aten_meta::check_out(op, written, dst, spec, /*exact_dtype=*/true);
    // addmm_ reads self as the bias while writing it: Destination computes into a temporary
    // unless self is contiguous, and the bias copy into itself is then a no-op.
    matmul_into(dst, mat1, mat2, self, call.arg("beta"), call.arg("alpha"));
  };
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cpu, m) {
  kernels::register_matmul_kernels(m, mm_kernel, addmm_kernel);
}

}  // namespace symmflow::cpu
