// The skinny GEMM kernel (skinny_gemm.hpp).
//
// Note [skinny GEMM]: with 16 rows of activations, y = x @ w is a stream over w: 16 x 4096 x 4096
// bf16 is 537 MFLOP but 32 MiB of weight, so its floor is the time to read w once (about 7 µs on
// an H200); cuBLAS and cuBLASLt's best heuristic algorithm take 12.4 µs, this kernel 10.2 µs
// (bench_cuda_gemm, CUDA graph of back-to-back GEMMs over distinct weights). It only streams:
//   - a block owns 32 output columns and 8 warps; warp i owns the i-th eighth of k and runs its
//     own 4-stage cp.async pipeline (32 rows of w and the matching 16 x 32 slice of x per stage,
//     zero-filled past the ends), so each multiprocessor keeps ~70 KB of loads in flight with no
//     block-wide barrier in the loop;
//   - tensor cores do the arithmetic (mma m16n8k16, f32 accumulation): x is the 16-row A operand
//     (rows past m are zeros), w's tiles are transposed on the way in by ldmatrix.trans; tiles
//     are stored XOR-swizzled so those loads hit 8 different banks; a w stored transposed ([n, k]
//     rows: nn.Linear's weight, as transformers' models hold it) is staged as 32 rows of n by 32
//     of k and read by ldmatrix without .trans, which gives the mma the same B fragments;
//   - the 8 partial sums of a column are added in warp order through shared memory, so results
//     are deterministic (the same bits on every run and every rank).
// One launch per GEMM, no workspace, no atomics: capturable into a CUDA graph as is. Measured and
// dropped (H200): 6 or 8 stages (no change), 16 warps (5-10% slower), 64-column blocks with k
// split over a thread-block cluster reduced through distributed shared memory (10% slower than
// 32-column blocks unsplit at n = 4096; the split kept below is of 32-column blocks, taken only
// for too few columns to fill half the GPU),
// the L2::256B hint (2% slower than 128B), warps taking every 8th stage of k instead of an
// eighth in one piece (10% slower), one cp.async.bulk (TMA engine) per 64-byte row segment with
// mbarrier completion (3x slower: 34 µs). With more than one wave cuBLAS wins; skinny_gemm_fits
// leaves those shapes to it.
//
// Note [skinny GEMM split]: a weight of few columns (a decoder's k and v projections at TP2: 512
// columns, 16 blocks) left most multiprocessors idle, so cuBLAS took it (split-K and a second,
// reducing kernel: 6.2 µs for 16 x 4096 x 512 on an H200). Such a GEMM now splits k over 2, 4 or
// 8 blocks of one thread-block cluster (the fewest that give half the multiprocessors a block):
// each streams its share of w as above and leaves its 16 x 32 sums in shared memory; after a
// cluster barrier the first block adds the shares in order through distributed shared memory
// and stores y. One launch, no workspace, deterministic, capturable. Off unless
// SYMMFLOW_CUDA_SKINNY_GEMM_SPLIT=1: in the one run with it on (H200, TP2) the decoder's q, k
// and v took about what cuBLAS took (20.8 against 21.5 µs of kernel time, 3 launches fewer) and
// the MLP's column-parallel layers were not timed against cuBLAS alone.
//
// Note [skinny GEMM rows]: with SYMMFLOW_DETERMINISTIC=1 (results that do not depend on the batch,
// Note [batch-invariant products] in src/kernels/cpu/matmul.cpp) every bf16/f16 GEMM whose shape
// the kernel takes runs here, at any number of rows: the grid's second dimension cuts the rows
// into tiles of 16, each block streaming w for its tile (so w is read once per 16 rows: fine for
// decode's few rows, several times cuBLAS's time for a long prefill). A row's result does not
// depend on the other rows: each mma computes a row's outputs from that row alone, every warp
// takes the same eighth of k whatever m is, and the warps' and shares' sums are added in one
// order; so a row's bits are the same alone and in a batch. cuBLAS's do not (it picks its
// algorithm, and a split of k, by m).
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/pointwise/convert.cuh"
#include "kernels/cuda/early_launch.cuh"
#include "kernels/cuda/gemm/skinny_gemm.hpp"

namespace symmflow::cuda {
namespace {

constexpr int kWarps = 8;      // split of k inside a block (16 measured 5-10% slower)
constexpr int kBlockN = 32;    // output columns of a block
constexpr int kStageK = 32;    // rows of w per pipeline stage
constexpr int kStages = 4;     // 4, 6 and 8 measured the same
constexpr int kRowBytes = 64;  // a tile row: 32 16-bit values, four 16-byte chunks
constexpr int kWTileBytes = kStageK * kRowBytes;  // w: 32 k-rows x 32 columns
constexpr int kXTileBytes = 16 * kRowBytes;       // x: 16 rows x 32 k
constexpr int kStageBytes = kWTileBytes + kXTileBytes;
constexpr int kWarpBytes = kStages * kStageBytes;
constexpr int kSmemBytes = kWarps * kWarpBytes;  // 96 KiB
constexpr int kMaxSplit = 8;                     // blocks of a cluster (the portable most)
static_assert((kWarps + 1) * 16 * kBlockN * 4 <= kSmemBytes,
              "the warps' partial sums and the block's reuse the pipeline");

// Byte offset of 16-byte chunk c of row r in a tile of 64-byte rows, swizzled so that the eight
// rows one ldmatrix reads (same logical chunk) land in eight different 16-byte bank groups.
__device__ __forceinline__ uint32_t swizzle(int r, int c) {
  return uint32_t(r * kRowBytes + ((c ^ ((r >> 1) & 3)) << 4));
}

// 16 bytes from global to shared memory, zeros when !valid. The L2::128B hint makes a miss fetch
// the whole 128-byte line (the neighbouring block's columns too): 5% faster than without, and
// than 256B (bench_cuda_gemm, H200).
__device__ __forceinline__ void copy16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

template <int N>
__device__ __forceinline__ void wait_pending() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

template <typename T, bool WT>
__global__ void __launch_bounds__(kWarps * 32)
    skinny_gemm_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int m,
                       int n, int k, int64_t ldx, int64_t ldw, int64_t ldy, float alpha,
                       float beta, bool w_stable, int split) {
  extern __shared__ __align__(128) unsigned char smem[];
  // Note [skinny GEMM rows]: block row blockIdx.y takes rows [16 y, 16 y + 16).
  x += int64_t(blockIdx.y) * 16 * ldx;
  y += int64_t(blockIdx.y) * 16 * ldy;
  m -= int(blockIdx.y) * 16;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  // Note [skinny GEMM split]: blocks [tile * split, (tile + 1) * split) are one cluster, each
  // an equal share of k's stages.
  const int tile = int(blockIdx.x) / split, share = int(blockIdx.x) % split;
  const int n0 = tile * kBlockN;
  const int stages = (k + kStageK - 1) / kStageK;
  const int lo = stages * share / split, len = stages * (share + 1) / split - lo;
  const int first = lo + len * warp / kWarps, count = lo + len * (warp + 1) / kWarps - first;
  const uint32_t base = uint32_t(__cvta_generic_to_shared(smem)) + uint32_t(warp * kWarpBytes);

  auto load_w = [&](int s) {  // stage s of this warp into buffer s % kStages
    const int k0 = (first + s) * kStageK;
    const uint32_t wt = base + uint32_t((s % kStages) * kStageBytes);
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // w: 32 rows x 4 chunks (rows: k, or n when WT)
      const int idx = i * 32 + lane, r = idx >> 2, c = idx & 3;
      if constexpr (WT) {
        const bool ok = n0 + r < n && k0 + c * 8 < k;
        copy16(wt + swizzle(r, c), ok ? w + int64_t(n0 + r) * ldw + k0 + c * 8 : w, ok);
      } else {
        const bool ok = k0 + r < k && n0 + c * 8 < n;
        copy16(wt + swizzle(r, c), ok ? w + int64_t(k0 + r) * ldw + n0 + c * 8 : w, ok);
      }
    }
  };
  auto load_x = [&](int s) {
    const int k0 = (first + s) * kStageK;
    const uint32_t xt = base + uint32_t((s % kStages) * kStageBytes) + kWTileBytes;
#pragma unroll
    for (int i = 0; i < 2; ++i) {  // x: 16 rows x 4 chunks
      const int idx = i * 32 + lane, r = idx >> 2, c = idx & 3;
      const bool ok = r < m && k0 + c * 8 < k;
      copy16(xt + swizzle(r, c), ok ? x + int64_t(r) * ldx + k0 + c * 8 : x, ok);
    }
  };

  // Note [early launch]: the first stages of w stream in while the kernel ahead ends (its output
  // may be x); they join the first commit group, so the pipeline's group count is unchanged.
  if (w_stable) {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < count) load_w(s);
    }
  }
  wait_for_kernel_ahead();
  release_kernel_behind();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < count) {
      if (!w_stable) load_w(s);
      load_x(s);
    }
    commit();  // empty groups keep the count of pending groups uniform
  }
  float acc[4][4] = {};
  const int j = lane >> 3, row8 = lane & 7;  // the matrix and row this lane addresses
  for (int s = 0; s < count; ++s) {
    wait_pending<kStages - 2>();  // stage s has landed (for this lane)
    __syncwarp();                 // ... and for every lane; buffer s-1 is free
    if (s + kStages - 1 < count) {
      load_w(s + kStages - 1);
      load_x(s + kStages - 1);
    }
    commit();
    const uint32_t wt = base + uint32_t((s % kStages) * kStageBytes), xt = wt + kWTileBytes;
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {  // two k16 steps per stage
      uint32_t a[4];
      ldmatrix(xt + swizzle((j & 1) * 8 + row8, ks * 2 + (j >> 1)), a);
#pragma unroll
      for (int p = 0; p < 2; ++p) {  // column tiles 2p and 2p+1
        uint32_t b[4];  // Note [skinny GEMM]: the same fragments from either layout of w
        if constexpr (WT) {
          ldmatrix(wt + swizzle((2 * p + (j >> 1)) * 8 + row8, ks * 2 + (j & 1)), b);
        } else {
          ldmatrix_trans(wt + swizzle(ks * 16 + (j & 1) * 8 + row8, 2 * p + (j >> 1)), b);
        }
        mma<T>(acc[2 * p], a, b[0], b[1]);
        mma<T>(acc[2 * p + 1], a, b[2], b[3]);
      }
    }
  }
  wait_pending<0>();
  __syncthreads();  // every warp is done with its pipeline: reuse it for the partial sums

  float* part = reinterpret_cast<float*>(smem);  // [warp][16 rows][32 columns]
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    float* lo = part + (warp * 16 + g) * kBlockN + nt * 8 + 2 * t;
    float* hi = lo + 8 * kBlockN;
    lo[0] = acc[nt][0];
    lo[1] = acc[nt][1];
    hi[0] = acc[nt][2];
    hi[1] = acc[nt][3];
  }
  __syncthreads();
  float* block_sum = part + kWarps * 16 * kBlockN;  // [16 rows][32 columns]: this block's share
  for (int o = int(threadIdx.x); o < 16 * kBlockN; o += kWarps * 32) {
    const int r = o / kBlockN, c = o % kBlockN;
    float sum = 0;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) sum += part[(i * 16 + r) * kBlockN + c];
    if (split > 1) {
      block_sum[o] = sum;
      continue;
    }
    if (r >= m || n0 + c >= n) continue;
    T* out = y + int64_t(r) * ldy + n0 + c;
    const float v = beta != 0 ? alpha * sum + beta * to_f(*out) : alpha * sum;
    *out = from_f<T>(v);
  }
  if (split == 1) return;  // uniform: every block of the launch
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every share is in its block's shared memory
  if (share == 0) {  // the cluster's first block adds the shares in order: deterministic
    for (int o = int(threadIdx.x); o < 16 * kBlockN; o += kWarps * 32) {
      const int r = o / kBlockN, c = o % kBlockN;
      if (r >= m || n0 + c >= n) continue;
      float sum = 0;
      for (int q = 0; q < split; ++q) sum += cluster.map_shared_rank(block_sum, q)[o];
      T* out = y + int64_t(r) * ldy + n0 + c;
      const float v = beta != 0 ? alpha * sum + beta * to_f(*out) : alpha * sum;
      *out = from_f<T>(v);
    }
  }
  cluster.sync();  // the first block has read every share before any block exits
}

template <typename T, bool WT>
cudaError_t launch(const SkinnyGemm& g, cudaStream_t s) {
  static thread_local int configured = -1;  // the device whose attribute this thread set
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (configured != device) {
    cudaError_t e = cudaFuncSetAttribute(skinny_gemm_kernel<T, WT>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (e != cudaSuccess) return e;
    configured = device;
  }
  const int split = g.split < 1 ? 1 : g.split;
  const unsigned blocks = unsigned((g.n + kBlockN - 1) / kBlockN * split);
  cudaLaunchAttribute attr[2] = {};
  int used = 0;
  if (g.early) {  // Note [early launch]
    attr[used].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[used++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (split > 1) {  // Note [skinny GEMM split]
    attr[used].id = cudaLaunchAttributeClusterDimension;
    attr[used].val.clusterDim.x = unsigned(split);
    attr[used].val.clusterDim.y = 1;
    attr[used++].val.clusterDim.z = 1;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks, unsigned((g.m + 15) / 16));  // Note [skinny GEMM rows]
  config.blockDim = dim3(kWarps * 32);
  config.dynamicSmemBytes = kSmemBytes;
  config.stream = s;
  config.attrs = attr;
  config.numAttrs = unsigned(used);
  return cudaLaunchKernelEx(&config, skinny_gemm_kernel<T, WT>, static_cast<const T*>(g.x),
                            static_cast<const T*>(g.w), static_cast<T*>(g.y), int(g.m), int(g.n),
                            int(g.k), g.ldx, g.ldw, g.ldy, g.alpha, g.beta,
                            g.early && g.w_stable, split);
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

int skinny_gemm_split(const SkinnyGemm& g, int64_t max_rows, int sms) {
  const int64_t limit = max_rows < kSkinnyGemmMaxRows ? max_rows : kSkinnyGemmMaxRows;
  const int64_t tiles = (g.n + kBlockN - 1) / kBlockN;
  int split = 1;  // Note [skinny GEMM split]: the fewest shares that fill half the GPU
  while (2 * tiles * split < sms && split < kMaxSplit) split *= 2;
  const int64_t blocks = tiles * split;
  const bool fits =
      2 * blocks >= sms && blocks <= sms && g.m >= 1 && g.m <= limit && g.n >= 8 && g.k >= 8 &&
         g.n % 8 == 0 && g.k % 8 == 0 && g.n < (int64_t(1) << 31) && g.k < (int64_t(1) << 31) &&
         g.ldx % 8 == 0 && g.ldw % 8 == 0 && g.ldx >= g.k && g.ldw >= (g.w_t ? g.k : g.n) &&
         g.ldy >= g.n && aligned16(g.x) && aligned16(g.w);
  return fits ? split : 0;
}

// Note [skinny GEMM rows]: the shape rules of skinny_gemm_split without the row limit and the
// one-wave rule.
bool skinny_gemm_takes_rows(const SkinnyGemm& g) {
  return g.m >= 1 && g.m <= kSkinnyGemmMaxRowTiles * 16 && g.n >= 8 && g.k >= 8 &&
         g.n % 8 == 0 && g.k % 8 == 0 && g.n < (int64_t(1) << 31) && g.k < (int64_t(1) << 31) &&
         g.ldx % 8 == 0 && g.ldw % 8 == 0 && g.ldx >= g.k && g.ldw >= (g.w_t ? g.k : g.n) &&
         g.ldy >= g.n && aligned16(g.x) && aligned16(g.w);
}

bool skinny_gemm_fits(const SkinnyGemm& g, int64_t max_rows, int sms) {
  return skinny_gemm_split(g, max_rows, sms) > 0;
}

namespace {
std::atomic<int64_t> g_launches{0};
}  // namespace

int64_t skinny_gemm_launches() { return g_launches.load(std::memory_order_relaxed); }

int launch_skinny_gemm(const SkinnyGemm& g, void* stream) {
  g_launches.fetch_add(1, std::memory_order_relaxed);
  auto s = static_cast<cudaStream_t>(stream);
  if (g.w_t) return int(g.f16 ? launch<__half, true>(g, s) : launch<__nv_bfloat16, true>(g, s));
  return int(g.f16 ? launch<__half, false>(g, s) : launch<__nv_bfloat16, false>(g, s));
}

}  // namespace symmflow::cuda
