// CPU kernels of the aten pointwise ops (add/sub/mul/div in every overload, sin ... neg, rsqrt,
// reciprocal with their out and in-place variants, pow.Tensor_Scalar, rsub.Scalar, clamp). One
// implementation per family: inputs are
// converted to the result dtype (PyTorch's promotion, from aten_meta), the typed loop writes the
// destination (the fresh output, `out`, or `self`), and a destination of another dtype gets the
// result through a copy. Loops: contiguous rows run a plain `__restrict` loop the compiler
// vectorizes (a Scalar or broadcast operand is a stride-0 operand); anything else uses the strided
// N-d path of strided.hpp. 16-bit floats compute in float. Exact aliasing of the destination with
// an input (in-place) is fine since each element is read before it is written; partial overlap is
// not.
#include <cmath>
#include <numbers>

#include "kernels/cpu/common.hpp"
#include "kernels/cpu/strided.hpp"
#include "kernels/cpu/vector_math.hpp"
#include "kernels/families.hpp"
#include "ops/aten/meta.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

using aten_meta::BinaryOp;
using aten_meta::UnaryOp;

// Integer arithmetic wraps (through the unsigned type) like PyTorch's two's complement results.
template <typename A>
inline A wrap_add(A a, A b) {
  if constexpr (std::is_same_v<A, bool>) {
    return a || b;
  } else if constexpr (kIsInt<A>) {
    using U = std::make_unsigned_t<A>;
    return A(U(a) + U(b));
  } else {
    return a + b;
  }
}
template <typename A>
inline A wrap_mul(A a, A b) {
  if constexpr (std::is_same_v<A, bool>) {
    return a && b;
  } else if constexpr (kIsInt<A>) {
    using U = std::make_unsigned_t<A>;
    return A(U(a) * U(b));
  } else {
    return a * b;
  }
}

template <typename A>
struct AddOp {
  A alpha;
  A operator()(A a, A b) const { return wrap_add(a, wrap_mul(alpha, b)); }
};
template <typename A>
struct AddOneOp {
  A operator()(A a, A b) const { return wrap_add(a, b); }
};
template <typename A>
struct MulOp {
  A operator()(A a, A b) const { return wrap_mul(a, b); }
};
template <typename A>
struct DivOp {
  A operator()(A a, A b) const { return a / b; }
};

// out = op(a, b) over the broadcast shape; every operand has element type T.
template <typename T, typename Op>
void binary_loop(const Tensor& out, const T* a, const Strides& a_strides, const T* b,
                 const Strides& b_strides, Op op) {
  using A = acc_t<T>;
  StridedLoop<3> loop = make_loop<3>(out.shape(), {out.strides(), a_strides, b_strides});
  T* o_base = static_cast<T*>(out.raw_data());
  for_each_row(loop, [&](const auto& off, const auto& step, int64_t n) {
    T* __restrict o = o_base + off[0];
    const T* __restrict x = a + off[1];
    const T* __restrict y = b + off[2];
    if (step[0] == 1 && step[1] == 1 && step[2] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = T(op(A(x[i]), A(y[i])));
    } else if (step[0] == 1 && step[1] == 1 && step[2] == 0) {
      const A yv = A(*y);
      for (int64_t i = 0; i < n; ++i) o[i] = T(op(A(x[i]), yv));
    } else if (step[0] == 1 && step[1] == 0 && step[2] == 1) {
      const A xv = A(*x);
      for (int64_t i = 0; i < n; ++i) o[i] = T(op(xv, A(y[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) {
        o[i * step[0]] = T(op(A(x[i * step[1]]), A(y[i * step[2]])));
      }
    }
  });
}

// out = self <kind> other (* alpha). `out` has the result dtype and shape.
void binary_compute(BinaryOp kind, const Tensor& out, const Tensor& self, const Value& other,
                    const Value& alpha) {
  DType dtype = out.dtype();
  Tensor a = as_dtype(self, dtype);
  Tensor b;
  if (other.is_tensor()) b = as_dtype(other.to_tensor(), dtype);
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    T scalar{};
    const T* b_data = &scalar;
    Strides b_strides(out.shape().size(), 0);
    if (b.defined()) {
      b_data = static_cast<const T*>(b.raw_data());
      b_strides = broadcast_strides(b.shape(), b.strides(), out.shape());
    } else {
      scalar = scalar_as<T>(other);
    }
    const T* a_data = static_cast<const T*>(a.raw_data());
    Strides a_strides = broadcast_strides(a.shape(), a.strides(), out.shape());
    A alpha_v = alpha.is_none() ? A(1) : scalar_as<A>(alpha);
    switch (kind) {
      case BinaryOp::add:
      case BinaryOp::sub:
        if (kind == BinaryOp::sub) alpha_v = wrap_mul(alpha_v, A(-1));
        if (alpha_v == A(1)) {
          binary_loop<T>(out, a_data, a_strides, b_data, b_strides, AddOneOp<A>{});
        } else {
          binary_loop<T>(out, a_data, a_strides, b_data, b_strides, AddOp<A>{alpha_v});
        }
        break;
      case BinaryOp::mul:
        binary_loop<T>(out, a_data, a_strides, b_data, b_strides, MulOp<A>{});
        break;
      case BinaryOp::div:
        if constexpr (kIsFloat<T>) {
          binary_loop<T>(out, a_data, a_strides, b_data, b_strides, DivOp<A>{});
        } else {
          SF_ASSERT(false && "division computes in a floating dtype");
        }
        break;
    }
  });
}

// The family entry point: `written` names the out/in-place argument, empty for functional.
Kernel binary_kernel(BinaryOp kind, bool has_alpha, const char* written) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const Tensor& self = call.arg("self").to_tensor();
    const Value& other = call.arg("other");
    Value alpha = has_alpha ? call.arg("alpha") : Value();
    TensorSpec spec = aten_meta::binary_spec(op, kind, self, other, alpha);
    if (*written == 0) {
      binary_compute(kind, call.out(0), self, other, alpha);
      return;
    }
    const Tensor& dst = call.arg(written).to_tensor();
    aten_meta::check_out(op, written, dst, spec);
    Destination d(dst, spec.dtype, /*need_contiguous=*/false);
    binary_compute(kind, d.tensor(), self, other, alpha);
    d.finish();
  };
}

// ---- Unary ----------------------------------------------------------------------------------

template <typename A>
struct UnaryFns {
  static A sin(A x) { return std::sin(x); }
  static A cos(A x) { return std::cos(x); }
  static A exp(A x) { return vexp(x); }  // Note [vector exp]
  static A tanh(A x) { return std::tanh(x); }
  static A rsqrt(A x) { return A(1) / std::sqrt(x); }
  static A reciprocal(A x) { return A(1) / x; }
  static A sigmoid(A x) { return A(1) / (A(1) + vexp(-x)); }
  static A silu(A x) { return x / (A(1) + vexp(-x)); }
  static A gelu(A x) { return A(0.5) * x * (A(1) + std::erf(x * A(1 / std::numbers::sqrt2))); }
  static A gelu_tanh(A x) {
    const A k = A(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);  // sqrt(2 / pi)
    return A(0.5) * x * (A(1) + std::tanh(k * (x + A(0.044715) * x * x * x)));
  }
};

template <typename T, typename F>
void unary_loop(const Tensor& out, const Tensor& in, F f) {
  using A = acc_t<T>;
  StridedLoop<2> loop = make_loop<2>(out.shape(), {out.strides(), in.strides()});
  T* o_base = static_cast<T*>(out.raw_data());
  const T* i_base = static_cast<const T*>(in.raw_data());
  for_each_row(loop, [&](const auto& off, const auto& step, int64_t n) {
    T* __restrict o = o_base + off[0];
    const T* __restrict x = i_base + off[1];
    if (step[0] == 1 && step[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = T(f(A(x[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * step[0]] = T(f(A(x[i * step[1]])));
    }
  });
}

void unary_compute(UnaryOp kind, bool tanh_gelu, const Tensor& out, const Tensor& self) {
  Tensor in = as_dtype(self, out.dtype());
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    if constexpr (kIsFloat<T>) {
      using Fn = UnaryFns<A>;
      switch (kind) {
        case UnaryOp::sin: return unary_loop<T>(out, in, [](A x) { return Fn::sin(x); });
        case UnaryOp::cos: return unary_loop<T>(out, in, [](A x) { return Fn::cos(x); });
        case UnaryOp::exp: return unary_loop<T>(out, in, [](A x) { return Fn::exp(x); });
        case UnaryOp::tanh: return unary_loop<T>(out, in, [](A x) { return Fn::tanh(x); });
        case UnaryOp::sigmoid: return unary_loop<T>(out, in, [](A x) { return Fn::sigmoid(x); });
        case UnaryOp::silu: return unary_loop<T>(out, in, [](A x) { return Fn::silu(x); });
        case UnaryOp::gelu:
          if (tanh_gelu) return unary_loop<T>(out, in, [](A x) { return Fn::gelu_tanh(x); });
          return unary_loop<T>(out, in, [](A x) { return Fn::gelu(x); });
        case UnaryOp::relu:  // NaN stays NaN (the comparison is false)
          return unary_loop<T>(out, in, [](A x) { return x < A(0) ? A(0) : x; });
        case UnaryOp::neg: return unary_loop<T>(out, in, [](A x) { return -x; });
        case UnaryOp::rsqrt: return unary_loop<T>(out, in, [](A x) { return Fn::rsqrt(x); });
        case UnaryOp::reciprocal:
          return unary_loop<T>(out, in, [](A x) { return Fn::reciprocal(x); });
      }
    } else if constexpr (kIsInt<T>) {
      using U = std::make_unsigned_t<T>;
      switch (kind) {
        case UnaryOp::relu:
          return unary_loop<T>(out, in, [](T x) { return x < T(0) ? T(0) : x; });
        case UnaryOp::neg: return unary_loop<T>(out, in, [](T x) { return T(U(0) - U(x)); });
        default: break;
      }
    }
    throw_error(ErrorCode::Internal, "aten::{}: no cpu kernel for dtype {}",
                aten_meta::unary_name(kind), dtype_name(out.dtype()));
  });
}

Kernel unary_kernel(UnaryOp kind, const char* written) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const Tensor& self = call.arg("self").to_tensor();
    bool tanh_gelu = kind == UnaryOp::gelu && aten_meta::gelu_is_tanh(op, call.arg("approximate"));
    TensorSpec spec = aten_meta::unary_spec(op, kind, self);
    if (*written == 0) {
      unary_compute(kind, tanh_gelu, call.out(0), self);
      return;
    }
    const Tensor& dst = call.arg(written).to_tensor();
    aten_meta::check_out(op, written, dst, spec);
    Destination d(dst, spec.dtype, /*need_contiguous=*/false);
    unary_compute(kind, tanh_gelu, d.tensor(), self);
    d.finish();
  };
}

// ---- pow.Tensor_Scalar ------------------------------------------------------------------------

// Note [pow special exponents]: PyTorch computes x ** 2 as x * x, x ** 3 as x * x * x, 0.5 as
// sqrt, -0.5 as 1 / sqrt, -1 as 1 / x and -2 as 1 / (x * x), std::pow otherwise, in the compute
// type (float for 16-bit floats); the GPU's pow instruction does the same (cuda/pointwise.cu).
// x ** 1 is x (std::pow's exact result too): autograd's backward of x ** 2 asks for it, at
// activation sizes, and std::pow there was 7% of a CPU training step's backward. The kernel picks
// the loops of 1, 2 and 3 once per call; pow_scalar has the rest.
template <typename A>
A pow_scalar(A x, A e) {
  if (e == A(0.5)) return std::sqrt(x);
  if (e == A(-0.5)) return A(1) / std::sqrt(x);
  if (e == A(-1)) return A(1) / x;
  if (e == A(-2)) return A(1) / (x * x);
  return std::pow(x, e);
}

void pow_scalar_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  const Value& exponent = call.arg("exponent");
  TensorSpec spec = aten_meta::pow_scalar_spec(call.op.name(), self, exponent);
  Tensor in = as_dtype(self, spec.dtype);
  visit_dtype(spec.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloat<T>) {
      using A = acc_t<T>;
      const A e = scalar_as<A>(exponent);
      const Tensor& out = call.out(0);
      // The special exponents' loops chosen once (Note [pow special exponents]), not per element.
      if (e == A(1)) {
        unary_loop<T>(out, in, [](A x) { return x; });
      } else if (e == A(2)) {
        unary_loop<T>(out, in, [](A x) { return x * x; });
      } else if (e == A(3)) {
        unary_loop<T>(out, in, [](A x) { return x * x * x; });
      } else {
        unary_loop<T>(out, in, [e](A x) { return pow_scalar(x, e); });
      }
    }
  });
}

// other - alpha * self: sub's loop with the operands swapped (the Scalar first, stride 0).
void rsub_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  const Value& other = call.arg("other");
  const Value& alpha = call.arg("alpha");
  TensorSpec spec = aten_meta::binary_spec(call.op.name(), BinaryOp::sub, self, other, alpha);
  const Tensor& out = call.out(0);
  Tensor a = as_dtype(self, spec.dtype);
  visit_dtype(spec.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T scalar = scalar_as<T>(other);
    const A alpha_v = wrap_mul(alpha.is_none() ? A(1) : scalar_as<A>(alpha), A(-1));
    binary_loop<T>(out, &scalar, Strides(out.shape().size(), 0), static_cast<const T*>(a.raw_data()),
                   broadcast_strides(a.shape(), a.strides(), out.shape()), AddOp<A>{alpha_v});
  });
}

// min(max(x, min), max) in the result dtype, NaN kept (a NaN bound gives NaN, as PyTorch's).
void clamp_kernel(KernelCall& call) {
  const Tensor& out = call.out(0);
  const Value& lo = call.arg("min");
  const Value& hi = call.arg("max");
  Tensor in = as_dtype(call.arg("self").to_tensor(), out.dtype());
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const bool has_lo = !lo.is_none(), has_hi = !hi.is_none();
    // The bounds in the result dtype first, as PyTorch converts them.
    const A l = has_lo ? A(scalar_as<T>(lo)) : A(0), h = has_hi ? A(scalar_as<T>(hi)) : A(0);
    unary_loop<T>(out, in, [=](A x) {
      if constexpr (kIsFloat<T>) {
        if (x != x) return x;
        if (has_lo && (l != l || x < l)) x = l;
        if (has_hi && (h != h || x > h)) x = h;
      } else {
        if (has_lo && x < l) x = l;
        if (has_hi && x > h) x = h;
      }
      return x;
    });
  });
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cpu, m) {
  kernels::register_pointwise_kernels(m, binary_kernel, unary_kernel);
  m.impl("pow.Tensor_Scalar", pow_scalar_kernel);
  m.impl("rsub.Scalar", rsub_kernel);
  m.impl("clamp", clamp_kernel);
}

}  // namespace symmflow::cpu
