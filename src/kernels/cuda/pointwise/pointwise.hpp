// The GPU pointwise engine: one kernel that runs a small register program per element. Eager
// pointwise ops are one-instruction programs; a fused region (fuse_pointwise) becomes one program
// over all its ops, so it reads its inputs and writes its outputs once, with no runtime
// compilation (Note [pointwise programs] in pointwise.cu). Plain structs, no CUDA types: host code
// fills them without CUDA headers. Private to the cuda backend.
#pragma once

#include <cstdint>

namespace symmflow::cuda {

constexpr int kPwMaxDims = 8;
constexpr int kPwMaxOperands = 10;  // tensors loaded or stored
constexpr int kPwMaxInstrs = 48;
constexpr int kPwMaxRegs = 24;

// Element types as stored in memory (symmflow::DType's numbering is not assumed).
enum class PwType : uint8_t { f32, f64, bf16, f16, i32, i64, i8, u32, boolean };

enum class PwOp : uint8_t {
  load,   // r[dst] = operand[a] at this element
  store,  // operand[a] at this element = r[b]
  konst,  // r[dst] = c
  add,    // r[dst] = r[a] + r[b]
  addmul, // r[dst] = r[a] + c * r[b]   (alpha != 1; computed as a multiply then an add)
  mul,
  div,
  neg,
  sin,
  cos,
  exp,
  tanh,
  sigmoid,
  silu,
  gelu,       // erf form
  gelu_tanh,  // tanh approximation
  relu,
  rsqrt,  // 1 / sqrt(a), both correctly rounded
  reciprocal,  // 1 / a, correctly rounded
  pow,    // a ** c, with the CPU's special exponents (Note [pow special exponents])
  copy,   // r[dst] = r[a]: with the rounding to dst's type, a dtype conversion (_to_copy)
};

struct PwOperand {
  void* data = nullptr;
  int64_t strides[kPwMaxDims] = {};  // elements, over the program's shape (0 where broadcast)
  PwType type = PwType::f32;
};

struct PwInstr {
  PwOp op = PwOp::konst;
  uint8_t dst = 0, a = 0, b = 0;
  PwType round = PwType::f64;  // the result is rounded to this type (f64: kept as computed)
  double c = 0;
};

struct PwProgram {
  PwOperand operands[kPwMaxOperands];
  PwInstr code[kPwMaxInstrs];
  int64_t sizes[kPwMaxDims] = {};  // the shape every operand is indexed over
  int64_t numel = 0;
  int ndim = 0;
  int n_operands = 0;
  int n_instrs = 0;
  bool contiguous = false;  // every operand is contiguous over the shape: offset = element index
  bool wide = false;        // compute in double (an f64 or 64-bit integer value takes part)
};

// Runs `p` on `stream`; returns the cudaError_t of the launch as an int.
int launch_pointwise(const PwProgram& p, void* stream);

}  // namespace symmflow::cuda
