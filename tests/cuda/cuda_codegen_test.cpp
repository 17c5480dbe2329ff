// The text of generated pointwise kernels (Note [pointwise codegen],
// src/kernels/cuda/pointwise/pointwise_codegen.cpp): casts, vectorized and strided indexing,
// pow's special exponents. No GPU needed: only the source is looked at; the GPU tests that run
// these kernels against the interpreter are in cuda_exec_test.cpp (CudaFused.*). Part of
// test_cuda_exec.
#include <string>

#include <gtest/gtest.h>

#include "kernels/cuda/pointwise/pointwise_codegen.hpp"
#include "symmflow/core/error.hpp"

namespace symmflow::cuda {
namespace {

// A contiguous program that loads operand 0 (of type `in`, rounded to `load_round`), converts it
// to `out` (a copy instruction rounded to out) and stores it into operand 1.
PwProgram cast(PwType in, PwType load_round, PwType out) {
  PwProgram p;
  p.contiguous = true;
  p.n_operands = 2;
  p.operands[0].type = in;
  p.operands[1].type = out;
  p.code[0] = PwInstr{PwOp::load, 0, 0, 0, load_round, 0};
  p.code[1] = PwInstr{PwOp::copy, 1, 0, 0, out, 0};
  p.code[2] = PwInstr{PwOp::store, 0, 1, 1, PwType::f64, 0};
  p.n_instrs = 3;
  return p;
}

// A cast is a `copy` instruction: the generated kernel spells it as the rounding to the result's
// dtype, the interpreter kernel's round_to (no GPU needed: the source is text).
TEST(CudaFused, CastIsACopyRoundedToItsDtype) {
  const PwProgram p = cast(PwType::f32, PwType::f32, PwType::bf16);
  const std::string source = pointwise_source(p);
  EXPECT_NE(source.find("r1 = float(bf16_f(f_bf16(float(r0))));"), std::string::npos) << source;
}

// Note [vectorized pointwise]: the vectorized text of a contiguous bf16 -> f32 cast loads 4
// elements of the input as one 8-byte struct, stores 4 floats as one 16-byte struct, and runs the
// same statements per element, with a scalar loop for the tail.
TEST(CudaFused, ContiguousProgramsLoadFourElementsAtOnce) {
  PwProgram p = cast(PwType::bf16, PwType::f64, PwType::f32);
  const std::string source = pointwise_source(p, /*vectorized=*/true);
  for (const char* want : {"struct __align__(8) V0 { u16 v[4]; };",
                           "struct __align__(16) V1 { float v[4]; };",
                           "V0 v0 = ((const V0*)a.data[0])[q];", "V1 v1;",
                           "r0 = float(bf16_f(v0.v[e]));", "v1.v[e] = float(r1);",
                           "((V1*)a.data[1])[q] = v1;", "r0 = float(bf16_f(((u16*)a.data[0])[i]));"}) {
    EXPECT_NE(source.find(want), std::string::npos) << want << " in\n" << source;
  }
  EXPECT_EQ(source.find("((V0*)a.data[0])[q] = v0;"), std::string::npos) << "the input is not stored";
  p.contiguous = false;
  EXPECT_THROW(pointwise_source(p, true), Error);
}

// A strided program (a [3, 1, 5] region: x permuted, k broadcast along dim 2, y contiguous)
// compiles with its shape and strides as constants: dims of size 1 are skipped, a broadcast
// operand has no term for its stride-0 dim, a contiguous one indexes by i; coordinates are 32-bit
// up to 2^31 - 1 elements.
TEST(CudaFused, StridedOperandsAreIndexedByConstantsInTheText) {
  PwProgram p;
  p.ndim = 3;
  p.sizes[0] = 3, p.sizes[1] = 1, p.sizes[2] = 5;
  p.numel = 15;
  p.n_operands = 3;
  const int64_t x[] = {1, 0, 3}, k[] = {7, 0, 0}, y[] = {5, 5, 1};
  for (int d = 0; d < 3; ++d) {
    p.operands[0].strides[d] = x[d];
    p.operands[1].strides[d] = k[d];
    p.operands[2].strides[d] = y[d];
  }
  p.code[0] = PwInstr{PwOp::load, 0, 0, 0, PwType::f32, 0};
  p.code[1] = PwInstr{PwOp::load, 1, 1, 0, PwType::f32, 0};
  p.code[2] = PwInstr{PwOp::add, 2, 0, 1, PwType::f32, 0};
  p.code[3] = PwInstr{PwOp::store, 0, 2, 2, PwType::f64, 0};
  p.n_instrs = 4;
  const std::string source = pointwise_source(p);
  for (const char* want : {"const u32 x2 = rest % 5U;", "const u32 x0 = rest % 3U;",
                           "((float*)a.data[0])[(i64(x2) * 3LL + i64(x0) * 1LL)]",
                           "((float*)a.data[1])[(i64(x0) * 7LL)]", "((float*)a.data[2])[i] = "}) {
    EXPECT_NE(source.find(want), std::string::npos) << want << " in\n" << source;
  }
  EXPECT_EQ(source.find("x1"), std::string::npos) << "a dim of size 1 has no coordinate\n" << source;
  // Past 2^31 - 1 elements the coordinates are 64-bit.
  p.sizes[2] = int64_t(1) << 31;
  p.numel = 3 * p.sizes[2];
  const std::string wide = pointwise_source(p);
  for (const char* want : {"const i64 x2 = rest % 2147483648LL;", "const i64 x0 = rest % 3LL;"}) {
    EXPECT_NE(wide.find(want), std::string::npos) << want << " in\n" << wide;
  }
}

// pow is spelled with the interpreter's special exponents (Note [pow special exponents]), compared
// in the compute type, and the rest through powf / pow. No GPU needed: only the text is looked at.
TEST(CudaCodegen, PowIsSpelledWithItsSpecialExponents) {
  PwProgram p;
  p.n_operands = 2;
  p.n_instrs = 3;
  p.code[0].op = PwOp::load;
  p.code[1] = PwInstr{PwOp::pow, 1, 0, 0, PwType::f64, 2.0};
  p.code[2] = PwInstr{PwOp::store, 0, 1, 1, PwType::f64, 0};
  EXPECT_TRUE(pointwise_compilable(p));
  struct Case {
    double e;
    bool wide;
    const char* want;
  };
  for (const Case& c : {Case{2.0, false, "r1 = __fmul_rn(r0, r0);"},
                        Case{3.0, false, "r1 = __fmul_rn(__fmul_rn(r0, r0), r0);"},
                        Case{1.0, false, "r1 = r0;"},
                        Case{0.5, false, "r1 = __fsqrt_rn(r0);"},
                        Case{-0.5, false, "r1 = __fdiv_rn(float(1), __fsqrt_rn(r0));"},
                        Case{-1.0, false, "r1 = __fdiv_rn(float(1), r0);"},
                        Case{-2.0, true, "r1 = __ddiv_rn(double(1), __dmul_rn(r0, r0));"},
                        // 2 + 1e-12 is 2 in float, not in double.
                        Case{2.0 + 1e-12, false, "r1 = __fmul_rn(r0, r0);"},
                        Case{2.0 + 1e-12, true, "r1 = pow(r0, double(__longlong_as_double("},
                        Case{1.5, false, "r1 = powf(r0, float(__longlong_as_double("}}) {
    p.code[1].c = c.e;
    p.wide = c.wide;
    const std::string source = pointwise_source(p);
    EXPECT_NE(source.find(c.want), std::string::npos) << c.e << ": " << c.want << " in\n" << source;
  }
}

}  // namespace
}  // namespace symmflow::cuda
