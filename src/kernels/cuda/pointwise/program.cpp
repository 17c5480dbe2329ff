// ProgramBuilder (program.hpp).
#include "kernels/cuda/pointwise/program.hpp"

#include <cuda_runtime_api.h>

#include "kernels/cuda/pointwise/pointwise_codegen.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::cuda {

int multiprocessors() {
  static thread_local int device = -1, count = 0;
  int current = 0;
  SF_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) {
    SF_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, current));
    device = current;
  }
  return count;
}

PwType pw_type(DType d) {
  switch (d) {
    case DType::f32: return PwType::f32;
    case DType::f64: return PwType::f64;
    case DType::bf16: return PwType::bf16;
    case DType::f16: return PwType::f16;
    case DType::i32: return PwType::i32;
    case DType::i64: return PwType::i64;
    case DType::i8: return PwType::i8;
    case DType::u32: return PwType::u32;
    case DType::boolean: return PwType::boolean;
  }
  return PwType::f32;
}

void check_float(std::string_view op, DType d) {
  SF_CHECK(d == DType::f32 || d == DType::bf16 || d == DType::f16 || d == DType::f64,
           "{}: dtype {} has no cuda kernel (f32, bf16, f16, f64)", op, dtype_name(d));
}

void check_on_gpu(std::string_view op, const Tensor& t) {
  SF_CHECK(t.device().type == DeviceType::cuda,
           "{}: tensor {} is on {}; every tensor operand must be on the GPU", op, t.str(),
           t.device().str());
}

std::string float_only(const OpDef& op, std::span<const Value> args) {
  auto refuse = [&](DType d) {
    return fmt::format("{}: dtype {} has no cuda kernel (f32, bf16, f16, f64)", op.name(),
                       dtype_name(d));
  };
  if (!op.schema().returns.empty()) {
    for (const TensorSpec& s : op.shape_fn()(args)) {
      if (!is_floating(s.dtype)) return refuse(s.dtype);
    }
    return "";
  }
  for (int i : op.aliases().written_args) {
    const Value& v = args[size_t(i)];
    if (v.is_tensor() && !is_floating(v.to_tensor().dtype())) return refuse(v.to_tensor().dtype());
  }
  return "";
}

ProgramBuilder::ProgramBuilder(const Shape& shape) : shape_(shape) {
  SF_CHECK(shape.size() <= size_t(kPwMaxDims), "cuda pointwise: {} dimensions (at most {})",
           shape.size(), kPwMaxDims);
  p_.ndim = int(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) p_.sizes[d] = shape[d];
  p_.numel = numel(shape);
  p_.contiguous = true;
}

int ProgramBuilder::operand(const Tensor& t, bool broadcast) {
  SF_CHECK(t.device().type == DeviceType::cuda,
           "cuda pointwise: tensor {} is on {}; every operand must be on the GPU", t.str(),
           t.device().str());
  SF_CHECK(p_.n_operands < kPwMaxOperands, "cuda pointwise: more than {} tensors in one program",
           kPwMaxOperands);
  const size_t nd = shape_.size(), td = t.shape().size();
  SF_CHECK(td <= nd, "cuda pointwise: {} does not broadcast to {}", t.str(), shape_str(shape_));
  PwOperand& o = p_.operands[p_.n_operands];
  o.data = t.raw_data();
  o.type = pw_type(t.dtype());
  const Strides want = contiguous_strides(shape_);
  for (size_t d = 0; d < nd; ++d) {
    int64_t stride = 0;
    if (d >= nd - td) {
      size_t s = d - (nd - td);
      SF_CHECK(t.shape()[s] == shape_[d] || (broadcast && t.shape()[s] == 1),
               "cuda pointwise: {} does not broadcast to {}", t.str(), shape_str(shape_));
      stride = t.shape()[s] == shape_[d] ? t.strides()[s] : 0;
    }
    o.strides[d] = stride;
    if (shape_[d] != 1 && stride != want[d]) p_.contiguous = false;
  }
  if (t.dtype() == DType::f64 || t.dtype() == DType::i64) p_.wide = true;
  return p_.n_operands++;
}

int ProgramBuilder::new_reg() {
  if (!free_regs_.empty()) {
    int r = free_regs_.back();
    free_regs_.pop_back();
    return r;
  }
  SF_CHECK(regs_ < kPwMaxRegs, "cuda pointwise: more than {} live values in one program",
           kPwMaxRegs);
  return regs_++;
}

void ProgramBuilder::release(int reg) { free_regs_.push_back(reg); }

void ProgramBuilder::emit(const PwInstr& in) {
  SF_CHECK(p_.n_instrs < kPwMaxInstrs, "cuda pointwise: more than {} instructions in one program",
           kPwMaxInstrs);
  p_.code[p_.n_instrs++] = in;
}

int ProgramBuilder::value(PwInstr in, DType round) {
  in.dst = uint8_t(new_reg());
  in.round = pw_type(round);
  if (round == DType::f64) p_.wide = true;
  emit(in);
  return in.dst;
}

int ProgramBuilder::load(const Tensor& t, DType round) {
  PwInstr in;
  in.op = PwOp::load;
  in.a = uint8_t(operand(t, true));
  return value(in, round);
}

int ProgramBuilder::konst(double c, DType round) {
  PwInstr in;
  in.op = PwOp::konst;
  in.c = c;
  return value(in, round);
}

int ProgramBuilder::op(PwOp op, int a, int b, DType round, double c) {
  PwInstr in;
  in.op = op;
  in.a = uint8_t(a);
  in.b = uint8_t(b);
  in.c = c;
  return value(in, round);
}

void ProgramBuilder::store(const Tensor& t, int reg) {
  SF_CHECK(t.shape() == shape_, "cuda pointwise: destination {} is not of shape {}", t.str(),
           shape_str(shape_));
  PwInstr in;
  in.op = PwOp::store;
  in.a = uint8_t(operand(t, false));
  in.b = uint8_t(reg);
  emit(in);
}

// Note [plan steps compiled]: an aten pointwise op that runs as a step of a plan (a copy into a
// strided layout, a residual add, a cast) runs as a compiled program (Note [pointwise codegen]),
// like a fused region: the interpreted kernel took about 3 us for a 16 x 4096 add or a transposed
// copy on an H200 (each instruction fetched and switched on), the compiled one 1-2 us. A plan has
// a fixed set of shapes, so each step compiles once (about 0.1 s, on its first run); eager calls,
// whose shapes are open-ended, stay interpreted, and so would a step with an instruction codegen
// does not spell (pointwise_compilable; pow is spelled with its special exponents since the
// interpreted pow steps of a training step's RMSNorm took 45-62 us each at 4 x 512 tokens).
void ProgramBuilder::launch() {
  if (tunables().cuda_pointwise_codegen && current_launch().in_plan && pointwise_compilable(p_)) {
    launch_compiled_pointwise(p_, current_stream());
    return;
  }
  SF_CUDA_CHECK(cudaError_t(launch_pointwise(p_, current_stream())));
}

void ProgramBuilder::launch_compiled() {
  if (!tunables().cuda_pointwise_codegen) {
    SF_CUDA_CHECK(cudaError_t(launch_pointwise(p_, current_stream())));
    return;
  }
  launch_compiled_pointwise(p_, current_stream());
}

PwOp unary_instr(aten_meta::UnaryOp kind, bool tanh_gelu) {
  using aten_meta::UnaryOp;
  switch (kind) {
    case UnaryOp::sin: return PwOp::sin;
    case UnaryOp::cos: return PwOp::cos;
    case UnaryOp::exp: return PwOp::exp;
    case UnaryOp::tanh: return PwOp::tanh;
    case UnaryOp::relu: return PwOp::relu;
    case UnaryOp::gelu: return tanh_gelu ? PwOp::gelu_tanh : PwOp::gelu;
    case UnaryOp::silu: return PwOp::silu;
    case UnaryOp::sigmoid: return PwOp::sigmoid;
    case UnaryOp::neg: return PwOp::neg;
    case UnaryOp::rsqrt: return PwOp::rsqrt;
    case UnaryOp::reciprocal: return PwOp::reciprocal;
  }
  return PwOp::neg;
}

int emit_binary(ProgramBuilder& b, aten_meta::BinaryOp kind, int x, int y, const Value& alpha,
                DType dtype) {
  using aten_meta::BinaryOp;
  switch (kind) {
    case BinaryOp::add:
    case BinaryOp::sub: {
      // The CPU multiplies by alpha in the compute type (float for 16-bit floats).
      double a = alpha.is_none() ? 1.0 : alpha.to_double();
      if (dtype != DType::f64) a = double(float(a));
      if (kind == BinaryOp::sub) a = -a;
      return a == 1.0 ? b.op(PwOp::add, x, y, dtype) : b.op(PwOp::addmul, x, y, dtype, a);
    }
    case BinaryOp::mul: return b.op(PwOp::mul, x, y, dtype);
    case BinaryOp::div: return b.op(PwOp::div, x, y, dtype);
  }
  return x;
}

}  // namespace symmflow::cuda
