// The generic GPU kernels of elementwise.hpp: one strided, broadcasting elementwise kernel
// templated on its op (Note [elementwise compute types]), any over reduced dims, the gather of
// Note [gather geometry] and a per-line cumsum. Written for clarity: one thread per output
// element (per line for cumsum), indices decomposed over the output's shape.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/collectives/collectives.hpp"
#include "kernels/cuda/pointwise/elementwise.hpp"
#include "kernels/cuda/pointwise/typed_access.cuh"

namespace symmflow::cuda {
namespace {

// A double rounded to the floating type t (16-bit floats round from float, as the CPU converts).
__device__ __forceinline__ double round_to(double v, PwType t) {
  switch (t) {
    case PwType::f32: return double(float(v));
    case PwType::bf16: return double(__bfloat162float(__float2bfloat16_rn(float(v))));
    case PwType::f16: return double(__half2float(__float2half_rn(float(v))));
    default: return v;
  }
}

// An int64 wrapped to the integer type t (as a conversion to it would).
__device__ __forceinline__ int64_t wrap_to(int64_t v, PwType t) {
  switch (t) {
    case PwType::i32: return int64_t(int32_t(v));
    case PwType::i8: return int64_t(int8_t(v));
    case PwType::u32: return int64_t(uint32_t(v));
    case PwType::boolean: return v != 0 ? 1 : 0;
    default: return v;
  }
}

template <typename C>
__device__ __forceinline__ void store(void* p, PwType t, int64_t off, C v) {
  switch (t) {
    case PwType::f32: static_cast<float*>(p)[off] = float(v); return;
    case PwType::f64: static_cast<double*>(p)[off] = double(v); return;
    case PwType::bf16: static_cast<__nv_bfloat16*>(p)[off] = __float2bfloat16_rn(float(v)); return;
    case PwType::f16: static_cast<__half*>(p)[off] = __float2half_rn(float(v)); return;
    case PwType::i32: static_cast<int32_t*>(p)[off] = int32_t(int64_t(v)); return;
    case PwType::i64: static_cast<int64_t*>(p)[off] = int64_t(v); return;
    case PwType::i8: static_cast<int8_t*>(p)[off] = int8_t(int64_t(v)); return;
    case PwType::u32: static_cast<uint32_t*>(p)[off] = uint32_t(int64_t(v)); return;
    case PwType::boolean: static_cast<bool*>(p)[off] = v != C(0); return;
  }
}

constexpr int inputs_of(ElemOp k) {
  switch (k) {
    case ElemOp::bit_not:
    case ElemOp::logical_not:
    case ElemOp::clamp: return 1;
    case ElemOp::where: return 3;
    case ElemOp::fill:
    case ElemOp::arange: return 0;
    default: return 2;
  }
}

// c10::div_floor_floating (Note [div rounding modes]).
template <typename F>
__device__ __forceinline__ F div_floor_float(F a, F b) {
  if (b == F(0)) return a / b;
  const F mod = fmod(a, b);
  F div = (a - mod) / b;
  if (mod != F(0) && (b < F(0)) != (mod < F(0))) div -= F(1);
  if (div == F(0)) return copysign(F(0), a / b);
  F floordiv = floor(div);
  if (div - floordiv > F(0.5)) floordiv += F(1);
  return floordiv;
}

template <ElemOp K, typename F>
__device__ __forceinline__ F div_float(F p, F q) {
  if constexpr (K == ElemOp::div_floor) return div_floor_float(p, q);
  if constexpr (K == ElemOp::div_trunc) return trunc(p / q);
  return p / q;
}

template <ElemOp K, typename C>
__device__ __forceinline__ C apply(const C* x, int64_t i, const ElemArgs& a) {
  if constexpr (K == ElemOp::div_true || K == ElemOp::div_trunc || K == ElemOp::div_floor) {
    if constexpr (std::is_same_v<C, int64_t>) {
      const int64_t p = x[0], q = x[1];
      if (q == 0) return 0;
      if (q == -1) return int64_t(uint64_t(0) - uint64_t(p));
      int64_t r = p / q;
      if (K == ElemOp::div_floor && p % q != 0 && ((p % q < 0) != (q < 0))) --r;
      return r;
    } else {
      if (a.compute == PwType::f64) return div_float<K>(x[0], x[1]);
      return C(div_float<K>(float(x[0]), float(x[1])));
    }
  }
  if constexpr (K == ElemOp::eq) return C(x[0] == x[1]);
  if constexpr (K == ElemOp::ne) return C(x[0] != x[1]);
  if constexpr (K == ElemOp::lt) return C(x[0] < x[1]);
  if constexpr (K == ElemOp::le) return C(x[0] <= x[1]);
  if constexpr (K == ElemOp::gt) return C(x[0] > x[1]);
  if constexpr (K == ElemOp::ge) return C(x[0] >= x[1]);
  if constexpr (K == ElemOp::logical_and) return C(x[0] != C(0) && x[1] != C(0));
  if constexpr (K == ElemOp::logical_or) return C(x[0] != C(0) || x[1] != C(0));
  if constexpr (K == ElemOp::logical_not) return C(x[0] == C(0));
  if constexpr (K == ElemOp::where) return x[0] != C(0) ? x[1] : x[2];
  if constexpr (K == ElemOp::clamp) {
    C v = x[0];
    if constexpr (std::is_same_v<C, int64_t>) {
      if (a.has_min && v < wrap_to(a.i0, a.compute)) v = wrap_to(a.i0, a.compute);
      if (a.has_max && v > wrap_to(a.i1, a.compute)) v = wrap_to(a.i1, a.compute);
    } else {
      if (v != v) return v;
      const C lo = round_to(a.c0, a.compute), hi = round_to(a.c1, a.compute);
      if (a.has_min && (lo != lo || v < lo)) v = lo;
      if (a.has_max && (hi != hi || v > hi)) v = hi;
    }
    return v;
  }
  if constexpr (std::is_same_v<C, int64_t>) {
    if constexpr (K == ElemOp::bit_and) return x[0] & x[1];
    if constexpr (K == ElemOp::bit_or) return x[0] | x[1];
    if constexpr (K == ElemOp::bit_xor) return x[0] ^ x[1];
    if constexpr (K == ElemOp::bit_not) {
      return a.out_type == PwType::boolean ? C(x[0] == 0) : ~x[0];
    }
    if constexpr (K == ElemOp::fill) return a.i0;
    // Note [integer pointwise on GPUs] (program.hpp): wrapping, as PyTorch's integer arithmetic.
    if constexpr (K == ElemOp::int_add) return int64_t(uint64_t(x[0]) + uint64_t(a.i1) * uint64_t(x[1]));
    if constexpr (K == ElemOp::int_sub) return int64_t(uint64_t(x[0]) - uint64_t(a.i1) * uint64_t(x[1]));
    if constexpr (K == ElemOp::int_mul) return int64_t(uint64_t(x[0]) * uint64_t(x[1]));
  } else {
    if constexpr (K == ElemOp::fill) return a.c0;
    if constexpr (K == ElemOp::arange) return __dadd_rn(a.c0, __dmul_rn(double(i), a.c1));
  }
  return C(0);
}

// I: the index type, int32_t when every offset of the call fits (index_fits_32): a 64-bit
// division per dim per element made a 64M-element mask comparison take 812 us on an H200.
template <ElemOp K, typename C, typename I>
__global__ void elementwise_kernel(const __grid_constant__ ElemArgs a) {
  constexpr int kIn = inputs_of(K);
  const I numel = I(a.numel);
  const I step = I(gridDim.x) * I(blockDim.x);
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < numel; i += step) {
    I rest = i, out_off = 0;
    I off[kElemMaxInputs] = {0, 0, 0};
    for (int d = a.ndim - 1; d >= 0; --d) {
      const I size = I(a.sizes[d]);
      const I k = rest % size;
      rest /= size;
      out_off += k * I(a.out_strides[d]);
      for (int n = 0; n < kIn; ++n) off[n] += k * I(a.in[n].strides[d]);
    }
    C x[kElemMaxInputs] = {C(0), C(0), C(0)};
    for (int n = 0; n < kIn; ++n) {
      const ElemOperand& o = a.in[n];
      if constexpr (std::is_same_v<C, int64_t>) {
        x[n] = o.data ? wrap_to(ld<C>(o.data, o.type, off[n]), a.compute) : a.i0;
      } else {
        x[n] = o.data ? round_to(ld<C>(o.data, o.type, off[n]), a.compute)
                      : round_to(a.c0, a.scalar_in_float ? PwType::f32 : a.compute);
      }
    }
    store<C>(a.out, a.out_type, out_off, apply<K, C>(x, int64_t(i), a));
  }
}

// The same call over fewer dims: dims of size 1 dropped, and a dim merged into the next where
// every operand (and the output) steps over both as over one (stride[d] = stride[d + 1] *
// size[d + 1]). The linear output index (arange's) is unchanged; each dim left costs a division
// per element.
ElemArgs coalesced(const ElemArgs& a) {
  ElemArgs c = a;
  c.ndim = 0;
  auto strides_ok = [&](int d, int e) {  // dim d of a merges into dim e of c
    auto fits = [&](const int64_t* from, const int64_t* to) {
      return to[e] == from[d] * a.sizes[d];
    };
    if (!fits(a.out_strides, c.out_strides)) return false;
    for (int n = 0; n < kElemMaxInputs; ++n) {
      if (a.in[n].data && !fits(a.in[n].strides, c.in[n].strides)) return false;
    }
    return true;
  };
  for (int d = 0; d < a.ndim; ++d) {
    if (a.sizes[d] == 1) continue;
    const int e = c.ndim - 1;
    if (e >= 0 && strides_ok(d, e)) {  // merge: dim e (outer) absorbs dim d (inner)
      c.sizes[e] *= a.sizes[d];
      c.out_strides[e] = a.out_strides[d];
      for (int n = 0; n < kElemMaxInputs; ++n) c.in[n].strides[e] = a.in[n].strides[d];
      continue;
    }
    c.sizes[c.ndim] = a.sizes[d];
    c.out_strides[c.ndim] = a.out_strides[d];
    for (int n = 0; n < kElemMaxInputs; ++n) c.in[n].strides[c.ndim] = a.in[n].strides[d];
    ++c.ndim;
  }
  return c;
}

// Whether every index and offset of the call (the output's and each operand's) fits int32_t.
bool index_fits_32(const ElemArgs& a) {
  constexpr int64_t kMax = int64_t(1) << 31;
  if (a.numel >= kMax) return false;
  auto span = [&](const int64_t* strides) {
    int64_t most = 0;
    for (int d = 0; d < a.ndim; ++d) {
      const int64_t st = strides[d] < 0 ? -strides[d] : strides[d];
      if (a.sizes[d] > 0 && st > 0 && (a.sizes[d] - 1) > (kMax - 1 - most) / st) return kMax;
      most += (a.sizes[d] - 1) * st;
    }
    return most;
  };
  if (span(a.out_strides) >= kMax) return false;
  for (const ElemOperand& o : a.in) {
    if (o.data && span(o.strides) >= kMax) return false;
  }
  return true;
}

bool is_integer(PwType t) {
  return t == PwType::i32 || t == PwType::i64 || t == PwType::i8 || t == PwType::u32 ||
         t == PwType::boolean;
}

int blocks_for(int64_t n, int threads) {
  const int64_t want = (n + threads - 1) / threads;
  return int(want < 8192 ? want : 8192);
}

template <ElemOp K, typename I>
void launch_indexed(const ElemArgs& a, cudaStream_t s) {
  if (is_integer(a.compute)) {
    elementwise_kernel<K, int64_t, I><<<blocks_for(a.numel, 256), 256, 0, s>>>(a);
  } else {
    elementwise_kernel<K, double, I><<<blocks_for(a.numel, 256), 256, 0, s>>>(a);
  }
}

template <ElemOp K>
void launch_op(const ElemArgs& a, cudaStream_t s) {
  if (index_fits_32(a)) {
    launch_indexed<K, int32_t>(a, s);
  } else {
    launch_indexed<K, int64_t>(a, s);
  }
}

__global__ void any_kernel(const __grid_constant__ AnyArgs a) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < a.out_numel; o += step) {
    int64_t rest = o, base = 0;
    for (int d = a.n_kept - 1; d >= 0; --d) {
      base += (rest % a.kept_sizes[d]) * a.kept_strides[d];
      rest /= a.kept_sizes[d];
    }
    bool any = false;
    for (int64_t r = 0; r < a.count && !any; ++r) {
      int64_t rr = r, off = base;
      for (int d = a.n_reduced - 1; d >= 0; --d) {
        off += (rr % a.reduced_sizes[d]) * a.reduced_strides[d];
        rr /= a.reduced_sizes[d];
      }
      any = ld<double>(a.in, a.in_type, off) != 0.0;  // NaN != 0
    }
    a.out[o] = any;
  }
}

// *to += *from, atomically, in type t (GatherArgs' accumulate). bf16 needs sm_80 and f16 sm_70;
// the build targets sm_90 (cmake/Cuda.cmake). Integers wrap (two's complement adds).
template <typename U>
__device__ __forceinline__ void atomic_add_as(char* to, const char* from) {
  atomicAdd(reinterpret_cast<U*>(to), *reinterpret_cast<const U*>(from));
}
__device__ __forceinline__ void atomic_add_to(char* to, const char* from, PwType t) {
  switch (t) {
    case PwType::f32: return atomic_add_as<float>(to, from);
    case PwType::f64: return atomic_add_as<double>(to, from);
    case PwType::bf16: return atomic_add_as<__nv_bfloat16>(to, from);
    case PwType::f16: return atomic_add_as<__half>(to, from);
    case PwType::i32: return atomic_add_as<int>(to, from);
    case PwType::u32: return atomic_add_as<unsigned>(to, from);
    case PwType::i64: return atomic_add_as<unsigned long long>(to, from);
    default: return;  // refused on the host
  }
}

__global__ void gather_kernel(const __grid_constant__ GatherArgs a) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.numel; i += step) {
    int64_t idx[kPwMaxDims];
    int64_t rest = i, src = 0;
    for (int d = a.ndim - 1; d >= 0; --d) {
      idx[d] = rest % a.sizes[d];
      rest /= a.sizes[d];
      src += idx[d] * a.self_strides[d];
    }
    bool ok = true;
    for (int k = 0; k < a.n_indices; ++k) {
      int64_t off = 0;
      for (int d = 0; d < a.ndim; ++d) off += idx[d] * a.index_strides[k][d];
      int64_t v = a.index_i64[k] ? static_cast<const int64_t*>(a.index[k])[off]
                                 : int64_t(static_cast<const int32_t*>(a.index[k])[off]);
      if (v < 0) v += a.dim_size[k];
      ok = ok && v >= 0 && v < a.dim_size[k];
      src += v * a.dim_stride[k];
    }
    const char* from = static_cast<const char*>(a.self) + src * a.elem_size;
    char* to = static_cast<char*>(a.out) + i * a.elem_size;
    if (a.values) {  // scatter: self[src] = values[i over values_strides]
      if (!ok) continue;
      int64_t voff = 0;
      for (int d = 0; d < a.ndim; ++d) voff += idx[d] * a.values_strides[d];
      to = const_cast<char*>(from);
      from = static_cast<const char*>(a.values) + voff * a.elem_size;
      if (a.accumulate) {
        atomic_add_to(to, from, a.type);
        continue;
      }
    }
    switch (a.elem_size) {
      case 1: *to = ok ? *from : 0; break;
      case 2: *reinterpret_cast<uint16_t*>(to) = ok ? *reinterpret_cast<const uint16_t*>(from) : 0; break;
      case 4: *reinterpret_cast<uint32_t*>(to) = ok ? *reinterpret_cast<const uint32_t*>(from) : 0; break;
      default: *reinterpret_cast<uint64_t*>(to) = ok ? *reinterpret_cast<const uint64_t*>(from) : 0;
    }
  }
}

template <typename C>
__global__ void cumsum_kernel(const void* x, PwType xt, void* y, PwType yt, int64_t outer,
                              int64_t n, int64_t inner) {
  const int64_t lines = outer * inner;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t l = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; l < lines; l += step) {
    const int64_t base = (l / inner) * n * inner + l % inner;
    C acc = C(0);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t at = base + k * inner;
      if constexpr (std::is_same_v<C, int64_t>) {
        acc += wrap_to(ld<C>(x, xt, at), yt);
      } else {
        acc = __dadd_rn(acc, round_to(ld<C>(x, xt, at), yt));
      }
      store<C>(y, yt, at, acc);
    }
  }
}

int preload_elementwise_kernels() {
  cudaFuncAttributes attr;
  cudaFuncGetAttributes(&attr, elementwise_kernel<ElemOp::eq, double, int32_t>);
  cudaFuncGetAttributes(&attr, any_kernel);
  cudaFuncGetAttributes(&attr, gather_kernel);
  return int(cudaGetLastError());
}

const bool kPreloaded = register_kernel_preload(&preload_elementwise_kernels);

}  // namespace

int launch_elementwise(ElemOp op, const ElemArgs& args, void* stream) {
  if (args.numel == 0) return 0;
  const ElemArgs a = coalesced(args);
  auto s = static_cast<cudaStream_t>(stream);
  switch (op) {
    case ElemOp::eq: launch_op<ElemOp::eq>(a, s); break;
    case ElemOp::ne: launch_op<ElemOp::ne>(a, s); break;
    case ElemOp::lt: launch_op<ElemOp::lt>(a, s); break;
    case ElemOp::le: launch_op<ElemOp::le>(a, s); break;
    case ElemOp::gt: launch_op<ElemOp::gt>(a, s); break;
    case ElemOp::ge: launch_op<ElemOp::ge>(a, s); break;
    case ElemOp::bit_and: launch_op<ElemOp::bit_and>(a, s); break;
    case ElemOp::bit_or: launch_op<ElemOp::bit_or>(a, s); break;
    case ElemOp::bit_xor: launch_op<ElemOp::bit_xor>(a, s); break;
    case ElemOp::bit_not: launch_op<ElemOp::bit_not>(a, s); break;
    case ElemOp::logical_and: launch_op<ElemOp::logical_and>(a, s); break;
    case ElemOp::logical_or: launch_op<ElemOp::logical_or>(a, s); break;
    case ElemOp::logical_not: launch_op<ElemOp::logical_not>(a, s); break;
    case ElemOp::where: launch_op<ElemOp::where>(a, s); break;
    case ElemOp::fill: launch_op<ElemOp::fill>(a, s); break;
    case ElemOp::arange: launch_op<ElemOp::arange>(a, s); break;
    case ElemOp::div_true: launch_op<ElemOp::div_true>(a, s); break;
    case ElemOp::div_trunc: launch_op<ElemOp::div_trunc>(a, s); break;
    case ElemOp::div_floor: launch_op<ElemOp::div_floor>(a, s); break;
    case ElemOp::int_add: launch_op<ElemOp::int_add>(a, s); break;
    case ElemOp::int_sub: launch_op<ElemOp::int_sub>(a, s); break;
    case ElemOp::int_mul: launch_op<ElemOp::int_mul>(a, s); break;
    case ElemOp::clamp: launch_op<ElemOp::clamp>(a, s); break;
  }
  return int(cudaGetLastError());
}

int launch_any(const AnyArgs& a, void* stream) {
  if (a.out_numel == 0) return 0;
  any_kernel<<<blocks_for(a.out_numel, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return int(cudaGetLastError());
}

int launch_gather(const GatherArgs& a, void* stream) {
  if (a.numel == 0) return 0;
  gather_kernel<<<blocks_for(a.numel, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return int(cudaGetLastError());
}

int launch_cumsum(const void* x, PwType xt, void* y, PwType yt, int64_t outer, int64_t n,
                  int64_t inner, void* stream) {
  const int64_t lines = outer * inner;
  if (lines == 0 || n == 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  if (is_integer(yt)) {
    cumsum_kernel<int64_t><<<blocks_for(lines, 128), 128, 0, s>>>(x, xt, y, yt, outer, n, inner);
  } else {
    cumsum_kernel<double><<<blocks_for(lines, 128), 128, 0, s>>>(x, xt, y, yt, outer, n, inner);
  }
  return int(cudaGetLastError());
}

}  // namespace symmflow::cuda
