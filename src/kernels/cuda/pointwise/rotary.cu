// The rotary embedding kernel (rotary.hpp): one thread per pair of output elements of a row
// (Note [rotary pairs]), rows grid-strided. Element (..., j) reads x at j and at its partner
// j ± D/2 (rotate_half: -x[j + D/2] below the middle, x[j - D/2] above), cos and sin at j, each
// through its strides; x * cos and rotate_half(x) * sin round to the dtype (16-bit floats compute
// in float), then their sum, with round-to-nearest intrinsics so nothing contracts into an FMA:
// the bits of aten::mul, aten::neg, aten::cat and aten::add run one by one (Note [fused compute
// ops] in ops/fused/rotary_embedding.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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
    I rest = row, xo = 0, co = 0, so = 0, oo = 0;
    for (int k = last - 1; k >= 0; --k) {
      const I size = I(a.shape[k]);
      const I ik = rest % size;
      rest /= size;
      xo += ik * I(a.x_strides[k]);
      co += ik * I(a.cos_strides[k]);
      so += ik * I(a.sin_strides[k]);
      oo += ik * I(a.out_strides[k]);
    }
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

// The largest element offset of an operand over the shape (strides are not negative).
int64_t last_offset(const RotaryArgs& a, const int64_t* strides) {
  int64_t off = 0;
  for (int k = 0; k < a.nd; ++k) off += (a.shape[k] - 1) * strides[k];
  return off;
}

template <typename T, typename A>
void launch_typed(const RotaryArgs& args, cudaStream_t s) {
  const int64_t half = args.shape[args.nd - 1] / 2, rows = args.numel / (2 * half);
  const int tx = half >= 128 ? 128 : half > 32 ? int((half + 31) / 32 * 32) : 32;
  const int ty = 256 / tx;
  const int64_t want = (rows + ty - 1) / ty;
  const int blocks = int(want < 16384 ? want : 16384);
  constexpr int64_t kNarrow = (int64_t(1) << 31) - 1;
  bool narrow = args.numel <= kNarrow;
  for (const int64_t* st : {args.x_strides, args.cos_strides, args.sin_strides, args.out_strides}) {
    narrow = narrow && last_offset(args, st) <= kNarrow;
  }
  if (narrow) {
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
