// Building pointwise programs (pointwise.hpp) from symmflow tensors: the host side that the cuda
// aten kernels and the executor's fused regions share. Private to the cuda backend.
//
//   ProgramBuilder b(out.shape());
//   int x = b.load(self, DType::bf16);          // broadcast to the shape, rounded to bf16
//   int y = b.op(PwOp::sin, x, x, DType::bf16);
//   b.store(out, y);
//   b.launch();                                 // on cuda::current_stream()
#pragma once

#include "kernels/cuda/pointwise/pointwise.hpp"
#include "ops/aten/meta.hpp"
#include "symmflow/core/tensor.hpp"

namespace symmflow::cuda {

PwType pw_type(DType d);
// InvalidUsage "op: dtype X has no cuda kernel (f32, bf16, f16, f64)" for other dtypes.
void check_float(std::string_view op, DType d);
// InvalidUsage "op: tensor X is on D; every tensor operand must be on the GPU" unless t is.
void check_on_gpu(std::string_view op, const Tensor& t);
// The current GPU's multiprocessor count (cached per thread and device).
int multiprocessors();
// Note [kernel checks] (ops/registry.hpp) for kernels that take floats only: check_float's text
// for the first result (or, for an op returning nothing, written argument) of another dtype.
std::string float_only(const OpDef& op, std::span<const Value> args);

// Note [integer pointwise on GPUs]: add, sub (with alpha) and mul of bool and integer tensors,
// which transformers' mask and position arithmetic uses (arange + 0, ids - offset), run on the
// elementwise kernel with integer compute (aten_logic.cpp), exact and wrapping as PyTorch's;
// the pointwise programs (pointwise_codegen) take floats only. `dtype` is the result's.
void integer_binary(std::string_view op, aten_meta::BinaryOp kind, const Tensor& dst, DType dtype,
                    const Tensor& self, const Value& other, const Value& alpha);
// rsub.Scalar of bool and integer results: other - alpha * self, wrapping (aten_logic.cpp).
void integer_rsub(std::string_view op, const Tensor& dst, DType dtype, const Tensor& self,
                  const Value& other, const Value& alpha);
// out = cond ? values : self, each broadcast to out's shape and read in its own dtype, in one
// launch of the elementwise `where` (aten_logic.cpp): no allocation.
void masked_select_into(std::string_view op, const Tensor& out, const Tensor& cond,
                        const Tensor& values, const Tensor& self);
// index_put's integer form (aten_logic.cpp): g.self[indexed element i] = values[i], values (of
// self's dtype) broadcast to the indexing result's shape g.spec.shape; one launch, no allocation
// (GatherArgs' scatter: an index out of range is skipped, one of repeated indices' values lands).
// With `accumulate`, g.self[indexed element i] += values[i] by atomic adds, so repeated indices
// sum; self's dtype must be one of scatter_accumulates (InvalidUsage otherwise).
void scatter_into(std::string_view op, const aten_meta::GatherGeometry& g, const Tensor& values,
                  bool accumulate = false);
// Whether scatter_into's accumulate takes dtype d: f32, f64, bf16, f16, i32, i64, u32 (atomicAdd).
bool scatter_accumulates(DType d);

class ProgramBuilder {
 public:
  explicit ProgramBuilder(const Shape& shape);
  // A register holding `t` (on this GPU, broadcastable to the shape), rounded to `round`.
  int load(const Tensor& t, DType round);
  int konst(double value, DType round);
  // r = op(a, b) (b ignored by unary ops; c is addmul's factor), rounded to `round`.
  int op(PwOp op, int a, int b, DType round, double c = 0);
  // Writes register `reg` into `t` (on this GPU, the program's shape), converted to its dtype.
  void store(const Tensor& t, int reg);
  // Registers are reused once their last reader has run: the caller says when one dies.
  void release(int reg);
  void launch();
  // The same program as its own compiled kernel (Note [pointwise codegen]) when
  // tunables().cuda_pointwise_codegen; else launch().
  void launch_compiled();

 private:
  int operand(const Tensor& t, bool broadcast);
  int new_reg();
  void emit(const PwInstr& in);
  // Emits `in` into a new register rounded to `round`; returns the register.
  int value(PwInstr in, DType round);
  PwProgram p_;
  Shape shape_;
  std::vector<int> free_regs_;
  int regs_ = 0;
};

// The instruction of a unary op (gelu's tanh approximation when `tanh_gelu`).
PwOp unary_instr(aten_meta::UnaryOp kind, bool tanh_gelu);
// r = x <kind> y (* alpha for add and sub; alpha None is 1), as the CPU computes it in `dtype`.
int emit_binary(ProgramBuilder& b, aten_meta::BinaryOp kind, int x, int y, const Value& alpha,
                DType dtype);

}  // namespace symmflow::cuda
