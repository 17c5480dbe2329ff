// The rotary embedding kernel (rotary.hpp): one thread per pair of output elements of a row
// (Note [rotary pairs]), or per pair of 16-byte packs of them where the layout allows (Note
// [rotary vectors]), rows grid-strided. Element (..., j) reads x at j and at its partner
// j ± D/2 (rotate_half: -x[j + D/2] below the middle, x[j - D/2] above), cos and sin at j, each
// through its strides; x * cos and rotate_half(x) * sin round to the dtype (16-bit floats compute
// in float), then their sum, with round-to-nearest intrinsics so nothing contracts into an FMA:
// the bits of aten::mul, aten::neg, aten::cat and aten::add run one by one (Note [fused compute
// ops] in ops/fused/rotary_embedding.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/pointwise/rotary.hpp"
#include "kernels/cuda/pointwise/typed_access.cuh"

namespace symmflow::cuda {
namespace {

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

// v rounded to T and read back (what storing a product and loading it does).
template <typename T, typename A>
__device__ __forceinline__ A round_to(A v) {
  const T t = stored<T>(v);
  return load_as<A>(&t, 0);
}

// The element offsets of row `row` (the last dim's index 0) in x, cos, sin and out.
template <typename I>
__device__ __forceinline__ void row_offsets(const RotaryArgs& a, I row, I& xo, I& co, I& so,
                                            I& oo) {
  I rest = row;
  xo = co = so = oo = 0;
  for (int k = a.nd - 2; k >= 0; --k) {
    const I size = I(a.shape[k]);
    const I ik = rest % size;
    rest /= size;
    xo += ik * I(a.x_strides[k]);
    co += ik * I(a.cos_strides[k]);
    so += ik * I(a.sin_strides[k]);
    oo += ik * I(a.out_strides[k]);
  }
}

// Note [rotary pairs]: a block is blockDim.y rows (each row one vector of the last dim) by
// blockDim.x pair indices; a thread computes out[j] and out[j + D/2] from x[j] and x[j + D/2], so
// each x element is loaded once, and a row's offsets are computed once per row and thread, in
// 32-bit arithmetic (index type I) when every offset and the row count fit in it (64-bit divisions
// are a long instruction sequence on GPUs: with one thread per element and four of them each, the
// query rotation of a 2048-token prefill took 83 us on an H200). The storage type T is a template
// argument (no per-element switch on a runtime type: Note [typed elements]).
template <typename T, typename A, typename I>
__global__ void rotary_kernel(const __grid_constant__ RotaryArgs a, I rows) {
  const int last = a.nd - 1;
  const I half = I(a.shape[last] / 2);
  const I xs = I(a.x_strides[last]), cs = I(a.cos_strides[last]), ss = I(a.sin_strides[last]),
          os = I(a.out_strides[last]);
  const T* x = static_cast<const T*>(a.x);
  const T* cosv = static_cast<const T*>(a.cos);
  const T* sinv = static_cast<const T*>(a.sin);
  T* out = static_cast<T*>(a.out);
  const I step = I(gridDim.x) * I(blockDim.y);
  for (I row = I(blockIdx.x) * I(blockDim.y) + I(threadIdx.y); row < rows; row += step) {
    I xo, co, so, oo;
    row_offsets(a, row, xo, co, so, oo);
    for (I j = I(threadIdx.x); j < half; j += I(blockDim.x)) {
      const I k = j + half;
      const A x1 = load_as<A>(x, xo + j * xs), x2 = load_as<A>(x, xo + k * xs);
      // out[j] = x1 * cos[j] + (-x2) * sin[j]; out[j + D/2] = x2 * cos[k] + x1 * sin[k].
      const A p1 = round_to<T>(mul_rn(x1, load_as<A>(cosv, co + j * cs)));
      const A q1 = round_to<T>(mul_rn(-x2, load_as<A>(sinv, so + j * ss)));
      out[oo + j * os] = stored<T>(add_rn(p1, q1));
      const A p2 = round_to<T>(mul_rn(x2, load_as<A>(cosv, co + k * cs)));
      const A q2 = round_to<T>(mul_rn(x1, load_as<A>(sinv, so + k * ss)));
      out[oo + k * os] = stored<T>(add_rn(p2, q2));
    }
  }
}

// Note [rotary vectors]: when every operand's last dim is contiguous and every row offset and
// base address is a multiple of V elements (V * sizeof(T) = 16 bytes), a thread moves V
// consecutive elements of each half with one 16-byte load or store per operand instead of V
// 2-byte ones; the arithmetic per element is the scalar kernel's, so the bits are the same. The
// query rotation of a 2048-token prefill (bf16, 32 heads of 128, a permuted view) took 38 us on an
// H200 with the scalar kernel, under 1 TB/s.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, typename A, typename I, int V>
__global__ void rotary_vector_kernel(const __grid_constant__ RotaryArgs a, I rows) {
  const int last = a.nd - 1;
  const I half = I(a.shape[last] / 2);
  const T* x = static_cast<const T*>(a.x);
  const T* cosv = static_cast<const T*>(a.cos);
  const T* sinv = static_cast<const T*>(a.sin);
  T* out = static_cast<T*>(a.out);
  using P = Pack<T, V>;
  const I step = I(gridDim.x) * I(blockDim.y);
  for (I row = I(blockIdx.x) * I(blockDim.y) + I(threadIdx.y); row < rows; row += step) {
    I xo, co, so, oo;
    row_offsets(a, row, xo, co, so, oo);
    for (I j = I(threadIdx.x) * V; j < half; j += I(blockDim.x) * V) {
      const I k = j + half;
      const P x1 = *reinterpret_cast<const P*>(x + xo + j);
      const P x2 = *reinterpret_cast<const P*>(x + xo + k);
      const P c1 = *reinterpret_cast<const P*>(cosv + co + j);
      const P c2 = *reinterpret_cast<const P*>(cosv + co + k);
      const P s1 = *reinterpret_cast<const P*>(sinv + so + j);
      const P s2 = *reinterpret_cast<const P*>(sinv + so + k);
      P o1, o2;
#pragma unroll
      for (int t = 0; t < V; ++t) {
        const A a1 = load_as<A>(x1.v, t), a2 = load_as<A>(x2.v, t);
        const A p1 = round_to<T>(mul_rn(a1, load_as<A>(c1.v, t)));
        const A q1 = round_to<T>(mul_rn(-a2, load_as<A>(s1.v, t)));
        o1.v[t] = stored<T>(add_rn(p1, q1));
        const A p2 = round_to<T>(mul_rn(a2, load_as<A>(c2.v, t)));
        const A q2 = round_to<T>(mul_rn(a1, load_as<A>(s2.v, t)));
        o2.v[t] = stored<T>(add_rn(p2, q2));
      }
      *reinterpret_cast<P*>(out + oo + j) = o1;
      *reinterpret_cast<P*>(out + oo + k) = o2;
    }
  }
}

// Whether the vector kernel of V elements serves `a` (Note [rotary vectors]).
bool vectorizable(const RotaryArgs& a, int v, size_t element) {
  const int last = a.nd - 1;
  if ((a.shape[last] / 2) % v != 0) return false;
  const void* bases[] = {a.x, a.cos, a.sin, a.out};
  for (const void* b : bases)
    if (reinterpret_cast<uintptr_t>(b) % (uintptr_t(v) * element) != 0) return false;
  for (const int64_t* st : {a.x_strides, a.cos_strides, a.sin_strides, a.out_strides}) {
    if (st[last] != 1) return false;
    for (int k = 0; k < last; ++k)
      if (st[k] % v != 0) return false;
  }
  return true;
}

// The largest element offset of an operand over the shape (strides are not negative).
int64_t last_offset(const RotaryArgs& a, const int64_t* strides) {
  int64_t off = 0;
  for (int k = 0; k < a.nd; ++k) off += (a.shape[k] - 1) * strides[k];
  return off;
}

template <typename T, typename A>
void launch_typed(const RotaryArgs& args, cudaStream_t s) {
  constexpr int V = int(16 / sizeof(T));
  const int64_t half = args.shape[args.nd - 1] / 2, rows = args.numel / (2 * half);
  const bool vector = vectorizable(args, V, sizeof(T));
  int tx = half >= 128 ? 128 : half > 32 ? int((half + 31) / 32 * 32) : 32;
  if (vector) {  // a power of two covering the row's packs, 128 at most
    tx = 1;
    while (tx < half / V && tx < 128) tx *= 2;
  }
  const int ty = 256 / tx;
  const int64_t want = (rows + ty - 1) / ty;
  const int blocks = int(want < 16384 ? want : 16384);
  constexpr int64_t kNarrow = (int64_t(1) << 31) - 1;
  bool narrow = args.numel <= kNarrow;
  for (const int64_t* st : {args.x_strides, args.cos_strides, args.sin_strides, args.out_strides}) {
    narrow = narrow && last_offset(args, st) <= kNarrow;
  }
  if (vector && narrow) {
    rotary_vector_kernel<T, A, int32_t, V><<<blocks, dim3(tx, ty), 0, s>>>(args, int32_t(rows));
  } else if (vector) {
    rotary_vector_kernel<T, A, int64_t, V><<<blocks, dim3(tx, ty), 0, s>>>(args, rows);
  } else if (narrow) {
    rotary_kernel<T, A, int32_t><<<blocks, dim3(tx, ty), 0, s>>>(args, int32_t(rows));
  } else {
    rotary_kernel<T, A, int64_t><<<blocks, dim3(tx, ty), 0, s>>>(args, rows);
  }
}

}  // namespace

int launch_rotary(const RotaryArgs& args, void* stream) {
  if (args.numel == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  switch (args.type) {
    case PwType::f64: launch_typed<double, double>(args, s); break;
    case PwType::bf16: launch_typed<__nv_bfloat16, float>(args, s); break;
    case PwType::f16: launch_typed<__half, float>(args, s); break;
    default: launch_typed<float, float>(args, s); break;
  }
  return int(cudaGetLastError());
}

}  // namespace symmflow::cuda
