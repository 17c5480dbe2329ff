// The GEMM of few rows (decode-sized activations times a weight matrix), bf16 and f16: a
// tensor-core kernel that does nothing but stream the weight (Note [skinny GEMM] in
// skinny_gemm.cu), 15-20% faster than cuBLAS on the MLP's 16 x 4096 x 4096. The cuda mm and
// addmm kernels (matmul.cpp) take it whenever skinny_gemm_fits says yes.
#pragma once

#include <cstdint>

namespace symmflow::cuda {

// y[m, n] = alpha * (x[m, k] @ w[k, n]) + beta * y, all row-major with leading dims ldx, ldw, ldy
// (in elements); f32 accumulation; y is read only when beta != 0. w_t: w is stored transposed,
// as rows of k ([n, k] row-major, leading dim ldw: nn.Linear's weight).
struct SkinnyGemm {
  const void* x = nullptr;
  const void* w = nullptr;
  void* y = nullptr;
  int64_t m = 0, n = 0, k = 0;
  int64_t ldx = 0, ldw = 0, ldy = 0;
  float alpha = 1, beta = 0;
  bool f16 = false;  // else bf16
  bool w_t = false;  // w stored as [n, k] rows
  // Note [early launch]: a programmatic dependent launch; w_stable: nothing in flight writes w
  // and the kernel ahead leaves memory idle, so the kernel loads its first stages of w before
  // waiting for it.
  bool early = false, w_stable = false;
  // Note [skinny GEMM split]: blocks of one cluster that share k (1, 2, 4 or 8), as
  // skinny_gemm_split gives it.
  int split = 1;
};

inline constexpr int64_t kSkinnyGemmMaxRows = 16;  // one tensor-core tile of rows
inline constexpr int64_t kSkinnyGemmMaxRowTiles = 65535;  // the grid's second dimension

// Whether the kernel takes this problem: 1 ≤ m ≤ min(max_rows, 16), n and k multiples of 8,
// leading dims multiples of 8 (w's at least n, or k when w_t) and x, w 16-byte aligned (its
// loads are 16 bytes), n and k below 2^31, and its n / 32 blocks (times its split) fill between half and all of the GPU's `sms`
// multiprocessors in one wave (where it beats cuBLAS; more blocks and cuBLAS wins,
// bench_cuda_gemm).
// max_rows is tunables().cuda_skinny_gemm_max_rows (0 turns the kernel off).
bool skinny_gemm_fits(const SkinnyGemm& g, int64_t max_rows, int sms);
// The split (Note [skinny GEMM split] in skinny_gemm.cu) that makes the problem fit: the fewest
// of 1, 2, 4 or 8 blocks per 32 columns that give at least half of `sms` a block; 0 when it does
// not fit (skinny_gemm_fits is split > 0).
int skinny_gemm_split(const SkinnyGemm& g, int64_t max_rows, int sms);
// Whether the kernel computes this problem at any number of rows, one block row per 16 (Note
// [skinny GEMM rows]): skinny_gemm_split's shape rules without its row limit and one-wave rule.
// Deterministic mode's GEMM (matmul.cpp).
bool skinny_gemm_takes_rows(const SkinnyGemm& g);
// What aten::mm runs (matmul.cpp): skinny_gemm_split under the tunables in force
// (cuda_skinny_gemm_max_rows; a split above 1 only with cuda_skinny_gemm_split); 0: cuBLAS.
// bench_cuda_gemm's mm_takes column asks it too.
int skinny_gemm_split_in_force(const SkinnyGemm& g, int sms);

// Launches on `stream` (capturable) and returns the cudaError_t of the launch. It computes any
// shape skinny_gemm_takes_rows allows (slower off the one-wave rule, still right), a block row
// per 16 rows.
int launch_skinny_gemm(const SkinnyGemm& g, void* stream);
// Launches so far in this process (tests check which path an mm took).
int64_t skinny_gemm_launches();

}  // namespace symmflow::cuda
