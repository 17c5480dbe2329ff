// The GPU pointwise engine (pointwise.hpp).
//
// Note [pointwise programs]: a pointwise op or a whole fused region is a straight-line register
// program: loads (any stored type, converted to the compute type), arithmetic, and stores
// (converted back). One kernel template runs any program, one element per thread iteration, so a
// fused region costs one pass over memory and nothing is compiled at run time; the instruction
// switch is uniform across a warp (every thread runs the same program), so it costs a few
// instructions per op, which a memory-bound kernel hides. Results match the CPU kernels:
// 16-bit floats compute in float, f64 in double; every op's result is rounded to its value's type
// (as the CPU's op-by-op execution rounds it); add and multiply use round-to-nearest intrinsics,
// so they are never contracted into an FMA (the CPU does not contract either), which makes add,
// sub, mul and div bitwise equal to the CPU; transcendental functions may differ by an ulp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/collectives/collectives.hpp"
#include "kernels/cuda/pointwise/pointwise.hpp"

namespace symmflow::cuda {
namespace {

__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double sqrt_rn(double a) { return __dsqrt_rn(a); }

// Note [pow special exponents] (kernels/cpu/pointwise.cpp); e is the exponent in the compute type.
template <typename F>
__device__ __forceinline__ F pow_scalar(F x, F e) {
  if (e == F(2)) return mul_rn(x, x);
  if (e == F(3)) return mul_rn(mul_rn(x, x), x);
  if (e == F(0.5)) return sqrt_rn(x);
  if (e == F(-0.5)) return div_rn(F(1), sqrt_rn(x));
  if (e == F(-1)) return div_rn(F(1), x);
  if (e == F(-2)) return div_rn(F(1), mul_rn(x, x));
  return pow(x, e);
}

template <typename F>
__device__ __forceinline__ F load_as(const PwOperand& o, int64_t off) {
  switch (o.type) {
    case PwType::f32: return F(static_cast<const float*>(o.data)[off]);
    case PwType::f64: return F(static_cast<const double*>(o.data)[off]);
    case PwType::bf16: return F(__bfloat162float(static_cast<const __nv_bfloat16*>(o.data)[off]));
    case PwType::f16: return F(__half2float(static_cast<const __half*>(o.data)[off]));
    case PwType::i32: return F(static_cast<const int32_t*>(o.data)[off]);
    case PwType::i64: return F(static_cast<const int64_t*>(o.data)[off]);
    case PwType::i8: return F(static_cast<const int8_t*>(o.data)[off]);
    case PwType::u32: return F(static_cast<const uint32_t*>(o.data)[off]);
    case PwType::boolean: return F(static_cast<const bool*>(o.data)[off] ? 1 : 0);
  }
  return F(0);
}

// 16-bit floats round from float (double goes through float first, as the CPU's conversion).
template <typename F>
__device__ __forceinline__ void store_as(const PwOperand& o, int64_t off, F v) {
  switch (o.type) {
    case PwType::f32: static_cast<float*>(o.data)[off] = float(v); return;
    case PwType::f64: static_cast<double*>(o.data)[off] = double(v); return;
    case PwType::bf16:
      static_cast<__nv_bfloat16*>(o.data)[off] = __float2bfloat16_rn(float(v));
      return;
    case PwType::f16: static_cast<__half*>(o.data)[off] = __float2half_rn(float(v)); return;
    case PwType::i32: static_cast<int32_t*>(o.data)[off] = int32_t(int64_t(v)); return;
    case PwType::i64: static_cast<int64_t*>(o.data)[off] = int64_t(v); return;
    case PwType::i8: static_cast<int8_t*>(o.data)[off] = int8_t(int64_t(v)); return;
    case PwType::u32: static_cast<uint32_t*>(o.data)[off] = uint32_t(int64_t(v)); return;
    case PwType::boolean: static_cast<bool*>(o.data)[off] = v != F(0); return;
  }
}

template <typename F>
__device__ __forceinline__ F round_to(F v, PwType t) {
  switch (t) {
    case PwType::f32: return F(float(v));
    case PwType::bf16: return F(__bfloat162float(__float2bfloat16_rn(float(v))));
    case PwType::f16: return F(__half2float(__float2half_rn(float(v))));
    default: return v;
  }
}

template <typename F>
__device__ __forceinline__ F apply(const PwInstr& in, const F* r) {
  const F a = r[in.a], b = r[in.b];
  switch (in.op) {
    case PwOp::konst: return F(in.c);
    case PwOp::add: return add_rn(a, b);
    case PwOp::addmul: return add_rn(a, mul_rn(F(in.c), b));
    case PwOp::mul: return mul_rn(a, b);
    case PwOp::div: return div_rn(a, b);
    case PwOp::neg: return -a;
    case PwOp::sin: return sin(a);
    case PwOp::cos: return cos(a);
    case PwOp::exp: return exp(a);
    case PwOp::tanh: return tanh(a);
    case PwOp::sigmoid: return div_rn(F(1), add_rn(F(1), exp(-a)));
    case PwOp::silu: return div_rn(a, add_rn(F(1), exp(-a)));
    case PwOp::gelu:
      return mul_rn(mul_rn(F(0.5), a), add_rn(F(1), erf(mul_rn(a, F(0.70710678118654752440)))));
    case PwOp::gelu_tanh: {
      const F k = F(0.79788456080286535588);  // sqrt(2 / pi)
      F inner = mul_rn(k, add_rn(a, mul_rn(mul_rn(mul_rn(F(0.044715), a), a), a)));
      return mul_rn(mul_rn(F(0.5), a), add_rn(F(1), tanh(inner)));
    }
    case PwOp::relu: return a < F(0) ? F(0) : a;  // NaN stays NaN
    case PwOp::rsqrt: return div_rn(F(1), sqrt_rn(a));
    case PwOp::reciprocal: return div_rn(F(1), a);
    case PwOp::pow: return pow_scalar(a, F(in.c));
    case PwOp::copy: return a;
    default: return F(0);
  }
}

template <typename F, bool kContiguous>
__global__ void pointwise_kernel(const __grid_constant__ PwProgram p) {
  F r[kPwMaxRegs];
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.numel; i += step) {
    int64_t idx[kPwMaxDims];
    if (!kContiguous) {
      int64_t rest = i;
      for (int d = p.ndim - 1; d >= 0; --d) {
        idx[d] = rest % p.sizes[d];
        rest /= p.sizes[d];
      }
    }
    auto offset = [&](const PwOperand& o) {
      if (kContiguous) return i;
      int64_t off = 0;
      for (int d = 0; d < p.ndim; ++d) off += idx[d] * o.strides[d];
      return off;
    };
    for (int k = 0; k < p.n_instrs; ++k) {
      const PwInstr& in = p.code[k];
      if (in.op == PwOp::load) {
        r[in.dst] = round_to(load_as<F>(p.operands[in.a], offset(p.operands[in.a])), in.round);
      } else if (in.op == PwOp::store) {
        store_as(p.operands[in.a], offset(p.operands[in.a]), r[in.b]);
      } else {
        r[in.dst] = round_to(apply(in, r), in.round);
      }
    }
  }
}

int preload_pointwise_kernels() {
  cudaFuncAttributes a;
  cudaFuncGetAttributes(&a, pointwise_kernel<float, true>);
  cudaFuncGetAttributes(&a, pointwise_kernel<float, false>);
  cudaFuncGetAttributes(&a, pointwise_kernel<double, true>);
  cudaFuncGetAttributes(&a, pointwise_kernel<double, false>);
  return int(cudaGetLastError());
}

const bool kPreloaded = register_kernel_preload(&preload_pointwise_kernels);

}  // namespace

int launch_pointwise(const PwProgram& p, void* stream) {
  if (p.numel == 0) return 0;
  const int threads = 256;
  const int64_t want = (p.numel + threads - 1) / threads;
  const int blocks = int(want < 8192 ? want : 8192);
  auto s = static_cast<cudaStream_t>(stream);
  if (p.wide) {
    if (p.contiguous) pointwise_kernel<double, true><<<blocks, threads, 0, s>>>(p);
    else pointwise_kernel<double, false><<<blocks, threads, 0, s>>>(p);
  } else {
    if (p.contiguous) pointwise_kernel<float, true><<<blocks, threads, 0, s>>>(p);
    else pointwise_kernel<float, false><<<blocks, threads, 0, s>>>(p);
  }
  return int(cudaGetLastError());
}

}  // namespace symmflow::cuda
