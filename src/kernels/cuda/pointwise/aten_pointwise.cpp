// cuda kernels of the aten pointwise, copy and factory ops, as pointwise programs (program.hpp):
// add/sub/mul/div in every overload, sin ... neg, rsqrt with out and in-place variants,
// pow.Tensor_Scalar, rsub.Scalar (integers through integer_rsub), copy_ (also between host and
// GPU), clone (and lift_fresh_copy), _to_copy, empty/zeros/full (+ out), and the view ops
// (kernels/views.hpp). Arithmetic takes f32, bf16,
// f16 and f64, like PyTorch's promotion on these (aten_meta); copies and fills take every dtype.
// Results equal the CPU kernels' bits for add, sub, mul and div (Note [pointwise programs]).
#include <cuda_runtime_api.h>

#include "kernels/cuda/pointwise/program.hpp"
#include "kernels/families.hpp"
#include "kernels/views.hpp"
#include "ops/aten/meta.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

using aten_meta::BinaryOp;
using aten_meta::UnaryOp;

// Copies with conversion and broadcasting between tensors on this GPU.
void device_copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.shape() == src.shape() && dst.is_contiguous() &&
      src.is_contiguous()) {
    SF_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(),
                                  cudaMemcpyDefault, static_cast<cudaStream_t>(current_stream())));
    return;
  }
  // No rounding before the store's conversion: f32 holds every f32, bf16 and f16 value exactly,
  // so copies among those compute in float; any other dtype goes through f64.
  auto narrow = [](DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16; };
  ProgramBuilder b(dst.shape());
  const DType via = narrow(dst.dtype()) && narrow(src.dtype()) ? DType::f32 : DType::f64;
  b.store(dst, b.load(src, via));
  b.launch();
}

void copy_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  const Tensor& src = call.arg("src").to_tensor();
  aten_meta::check_copy(call.op.name(), self, src);
  const bool self_gpu = self.device().type == DeviceType::cuda;
  const bool src_gpu = src.device().type == DeviceType::cuda;
  if (self_gpu && src_gpu) return device_copy(self, src);
  // Between host and GPU: one cudaMemcpy when nothing converts, else through a GPU temporary.
  if (self.dtype() == src.dtype() && self.shape() == src.shape() && self.is_contiguous() &&
      src.is_contiguous()) {
    if (self.numel() == 0) return;
    // A pageable copy blocks the host until the stream reaches it: wait for that first, without
    // holding the driver (Note [ranks sharing a GPU]).
    if (!capturing()) synchronize();
    SF_CUDA_CHECK(cudaMemcpyAsync(self.raw_data(), src.raw_data(), self.nbytes(),
                                  cudaMemcpyDefault, static_cast<cudaStream_t>(current_stream())));
    synchronize();  // the host side may be a temporary
    return;
  }
  if (self_gpu) return device_copy(self, to_device(src));
  aten::copy_(self, to_host(src));  // both on the host: the cpu kernel converts
}

void clone_kernel(KernelCall& call) { device_copy(call.out(0), call.arg("self").to_tensor()); }

void fill(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  ProgramBuilder b(dst.shape());
  b.store(dst, b.konst(value, DType::f64));
  b.launch();
}

Kernel fill_kernel(bool zeros, bool out_variant) {
  return [=](KernelCall& call) {
    const Tensor& dst = out_variant ? call.arg("out").to_tensor() : call.out(0);
    if (out_variant) {
      Shape shape = aten_meta::factory_size(call.op.name(), call.arg("size"));
      aten_meta::check_out(call.op.name(), "out", dst, TensorSpec{dst.dtype(), shape});
    }
    fill(dst, zeros ? 0.0 : call.arg("fill_value").to_double());
  };
}

void binary_compute(BinaryOp kind, const Tensor& dst, DType dtype, const Tensor& self,
                    const Value& other, const Value& alpha) {
  if (dst.numel() == 0) return;
  ProgramBuilder b(dst.shape());
  int x = b.load(self, dtype);
  int y = other.is_tensor() ? b.load(other.to_tensor(), dtype) : b.konst(other.to_double(), dtype);
  int r = emit_binary(b, kind, x, y, alpha, dtype);
  b.store(dst, r);
  b.launch();
}

Kernel binary_kernel(BinaryOp kind, bool has_alpha, const char* written) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const Tensor& self = call.arg("self").to_tensor();
    const Value& other = call.arg("other");
    Value alpha = has_alpha ? call.arg("alpha") : Value();
    TensorSpec spec = aten_meta::binary_spec(op, kind, self, other, alpha);
    if (!is_floating(spec.dtype) && kind != BinaryOp::div) {  // Note [integer pointwise on GPUs]
      const Tensor& dst = *written ? call.arg(written).to_tensor() : call.out(0);
      if (*written) aten_meta::check_out(op, written, dst, spec);
      integer_binary(op, kind, dst, spec.dtype, self, other, alpha);
      return;
    }
    check_float(op, spec.dtype);
    const Tensor& dst = *written ? call.arg(written).to_tensor() : call.out(0);
    if (*written) aten_meta::check_out(op, written, dst, spec);
    binary_compute(kind, dst, spec.dtype, self, other, alpha);
  };
}

Kernel unary_kernel(UnaryOp kind, const char* written) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const Tensor& self = call.arg("self").to_tensor();
    bool tanh_gelu = kind == UnaryOp::gelu && aten_meta::gelu_is_tanh(op, call.arg("approximate"));
    TensorSpec spec = aten_meta::unary_spec(op, kind, self);
    check_float(op, spec.dtype);
    const Tensor& dst = *written ? call.arg(written).to_tensor() : call.out(0);
    if (*written) aten_meta::check_out(op, written, dst, spec);
    if (dst.numel() == 0) return;
    ProgramBuilder b(dst.shape());
    int x = b.load(self, spec.dtype);
    b.store(dst, b.op(unary_instr(kind, tanh_gelu), x, x, spec.dtype));
    b.launch();
  };
}

void pow_scalar_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  const Value& exponent = call.arg("exponent");
  TensorSpec spec = aten_meta::pow_scalar_spec(op, self, exponent);
  check_float(op, spec.dtype);
  const Tensor& dst = call.out(0);
  if (dst.numel() == 0) return;
  // The exponent in the compute type, as the CPU kernel converts it (float for 16-bit floats).
  double e = exponent.to_double();
  if (spec.dtype != DType::f64) e = double(float(e));
  ProgramBuilder b(dst.shape());
  int x = b.load(self, spec.dtype);
  b.store(dst, b.op(PwOp::pow, x, x, spec.dtype, e));
  b.launch();
}

// other - alpha * self: sub's program with the operands swapped (integers: integer_rsub).
void rsub_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  const Value& other = call.arg("other");
  const Value& alpha = call.arg("alpha");
  TensorSpec spec = aten_meta::binary_spec(op, BinaryOp::sub, self, other, alpha);
  const Tensor& dst = call.out(0);
  if (!is_floating(spec.dtype)) return integer_rsub(op, dst, spec.dtype, self, other, alpha);
  if (dst.numel() == 0) return;
  ProgramBuilder b(dst.shape());
  int x = b.load(self, spec.dtype);
  int y = b.konst(other.to_double(), spec.dtype);
  b.store(dst, emit_binary(b, BinaryOp::sub, y, x, alpha, spec.dtype));
  b.launch();
}

}  // namespace

// The kernel check of the pointwise family: floats, and integers for add, sub and mul (Note
// [integer pointwise on GPUs] in program.hpp).
static std::string pointwise_check(const OpDef& op, std::span<const Value> args) {
  const std::string_view name = std::string_view(op.name()).substr(6);  // after "aten::"
  for (std::string_view integer_ok : {"add", "sub", "mul"}) {
    if (name.substr(0, 3) == integer_ok && (name[3] == '.' || name[3] == '_')) return "";
  }
  return float_only(op, args);
}

SYMMFLOW_LIBRARY_IMPL(aten, cuda, m) {
  m.impl("pow.Tensor_Scalar", pow_scalar_kernel);
  m.kernel_check("pow.Tensor_Scalar", float_only);
  m.impl("rsub.Scalar", rsub_kernel);
  kernels::register_view_kernels(m);
  m.impl("copy_", copy_kernel);
  m.impl("clone", clone_kernel);
  m.impl("lift_fresh_copy", clone_kernel);
  m.impl("_to_copy", clone_kernel);
  m.impl("empty.memory_format", [](KernelCall&) {});  // the dispatcher allocated it
  m.impl("zeros", fill_kernel(true, false));
  m.impl("zeros.out", fill_kernel(true, true));
  m.impl("full", fill_kernel(false, false));
  m.impl("full.out", fill_kernel(false, true));
  kernels::register_pointwise_kernels(m, binary_kernel, unary_kernel, pointwise_check);
}

}  // namespace symmflow::cuda
