// Pointwise programs as generated kernels (pointwise_codegen.hpp).
//
// Note [pointwise codegen]: a fused region's program (Note [pointwise programs]) is printed as a
// CUDA C++ kernel with one local variable per register and its instructions as straight-line
// code, compiled by NVRTC for the GPU's architecture, loaded as a cudaLibrary (valid in every
// context) and cached for the life of the process, keyed by what the text depends on. The text
// uses the same operations as the interpreter, spelled out (round-to-nearest intrinsics for add,
// multiply and divide, the same math functions, the same conversions by PTX cvt), so both give
// the same bits; it includes no header, so it compiles wherever NVRTC runs. Operand pointers and
// the element count are kernel arguments: one kernel serves every call of a region and every
// size. A region with broadcast or strided operands (Note [fused casts and broadcasts]) compiles
// too: its shape and every operand's strides are constants in the text (and in the cache key), so
// the index arithmetic divides by constants and skips broadcast dims; its kernel serves that
// shape only, as a plan's region always has one.
// Compiling (about 0.1 s) may happen inside a graph capture: it enqueues nothing.
#include "kernels/cuda/pointwise/pointwise_codegen.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nvrtc.h>

#include "runtime/cuda/check.hpp"
#include "symmflow/core/error.hpp"

namespace symmflow::cuda {
namespace {

// The kernel's argument, laid out the same in the generated source.
struct Args {
  int64_t numel = 0;
  void* data[kPwMaxOperands] = {};
};

constexpr const char* kPrelude = R"(typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
struct Args {
  i64 numel;
  void* data[10];
};
__device__ __forceinline__ float bf16_f(u16 h) { return __uint_as_float(u32(h) << 16); }
__device__ __forceinline__ u16 f_bf16(float f) {
  u16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float f16_f(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ u16 f_f16(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
)";
static_assert(kPwMaxOperands == 10, "the prelude's Args must match Args");

// Round-to-nearest arithmetic and the math functions of compute type F ("float" or "double").
struct Spelling {
  const char *F, *add, *mul, *div, *sin, *cos, *exp, *tanh, *erf, *sqrt;
};
constexpr Spelling kFloat{"float", "__fadd_rn", "__fmul_rn", "__fdiv_rn", "sinf",
                          "cosf",  "expf",      "tanhf",     "erff",      "__fsqrt_rn"};
constexpr Spelling kDouble{"double", "__dadd_rn", "__dmul_rn", "__ddiv_rn", "sin",
                           "cos",    "exp",       "tanh",      "erf",       "__dsqrt_rn"};

// An exact double literal of the compute type.
std::string literal(const Spelling& s, double c) {
  uint64_t bits;
  std::memcpy(&bits, &c, sizeof bits);
  return fmt::format("{}(__longlong_as_double(0x{:016x}LL))", s.F, bits);
}

// `at` is an lvalue of the operand's stored type (see pointwise_source).
std::string load_expr(const Spelling& s, PwType t, const std::string& at) {
  switch (t) {
    case PwType::bf16: return fmt::format("{}(bf16_f({}))", s.F, at);
    case PwType::f16: return fmt::format("{}(f16_f({}))", s.F, at);
    case PwType::boolean: return fmt::format("{}({} ? 1 : 0)", s.F, at);
    default: return fmt::format("{}({})", s.F, at);
  }
}

std::string store_stmt(PwType t, const std::string& at, const std::string& v) {
  switch (t) {
    case PwType::f32: return fmt::format("{} = float({});", at, v);
    case PwType::f64: return fmt::format("{} = double({});", at, v);
    case PwType::bf16: return fmt::format("{} = f_bf16(float({}));", at, v);
    case PwType::f16: return fmt::format("{} = f_f16(float({}));", at, v);
    case PwType::i32: return fmt::format("{} = int(i64({}));", at, v);
    case PwType::i64: return fmt::format("{} = i64({});", at, v);
    case PwType::i8: return fmt::format("{} = (signed char)(i64({}));", at, v);
    case PwType::u32: return fmt::format("{} = u32(i64({}));", at, v);
    case PwType::boolean: return fmt::format("{} = {} != 0;", at, v);
  }
  return "";
}

// `v` rounded to t as the interpreter's round_to does.
std::string rounded(const Spelling& s, PwType t, const std::string& v) {
  switch (t) {
    case PwType::f32: return fmt::format("{}(float({}))", s.F, v);
    case PwType::bf16: return fmt::format("{}(bf16_f(f_bf16(float({}))))", s.F, v);
    case PwType::f16: return fmt::format("{}(f16_f(f_f16(float({}))))", s.F, v);
    default: return v;
  }
}

// a ** c as the interpreter's pow_scalar computes it (Note [pow special exponents]): the exponent
// compared in the compute type, the special ones spelled as their multiplies, divides and square
// roots, the rest through the same pow function. 1 is a itself, pow's exact result.
std::string pow_spelled(const Spelling& s, const std::string& a, double c) {
  const bool narrow = std::string_view(s.F) == "float";
  const double e = narrow ? double(float(c)) : c;
  auto one = [&] { return fmt::format("{}(1)", s.F); };
  const std::string sq = fmt::format("{}({}, {})", s.mul, a, a);
  if (e == 1) return a;
  if (e == 2) return sq;
  if (e == 3) return fmt::format("{}({}, {})", s.mul, sq, a);
  if (e == 0.5) return fmt::format("{}({})", s.sqrt, a);
  if (e == -0.5) return fmt::format("{}({}, {}({}))", s.div, one(), s.sqrt, a);
  if (e == -1) return fmt::format("{}({}, {})", s.div, one(), a);
  if (e == -2) return fmt::format("{}({}, {})", s.div, one(), sq);
  return fmt::format("{}({}, {})", narrow ? "powf" : "pow", a, literal(s, e));
}

// The expression of one instruction's value, or "" for an op codegen has no spelling of.
std::string spelled(const Spelling& s, const PwInstr& in) {
  const std::string a = fmt::format("r{}", in.a), b = fmt::format("r{}", in.b);
  auto k = [&](const char* decimal) { return fmt::format("{}({})", s.F, decimal); };
  switch (in.op) {
    case PwOp::konst: return literal(s, in.c);
    case PwOp::add: return fmt::format("{}({}, {})", s.add, a, b);
    case PwOp::addmul:
      return fmt::format("{}({}, {}({}, {}))", s.add, a, s.mul, literal(s, in.c), b);
    case PwOp::mul: return fmt::format("{}({}, {})", s.mul, a, b);
    case PwOp::div: return fmt::format("{}({}, {})", s.div, a, b);
    case PwOp::neg: return "-" + a;
    case PwOp::sin: return fmt::format("{}({})", s.sin, a);
    case PwOp::cos: return fmt::format("{}({})", s.cos, a);
    case PwOp::exp: return fmt::format("{}({})", s.exp, a);
    case PwOp::tanh: return fmt::format("{}({})", s.tanh, a);
    case PwOp::sigmoid:
      return fmt::format("{}({}, {}({}, {}(-{})))", s.div, k("1"), s.add, k("1"), s.exp, a);
    case PwOp::silu:
      return fmt::format("{}({}, {}({}, {}(-{})))", s.div, a, s.add, k("1"), s.exp, a);
    case PwOp::gelu:
      return fmt::format("{0}({0}({1}, {2}), {3}({4}, {5}({0}({2}, {6}))))", s.mul, k("0.5"), a,
                         s.add, k("1"), s.erf, k("0.70710678118654752440"));
    case PwOp::gelu_tanh:
      return fmt::format(
          "{0}({0}({1}, {2}), {3}({4}, {5}({0}({6}, "
          "{3}({2}, {0}({0}({0}({7}, {2}), {2}), {2}))))))",
          s.mul, k("0.5"), a, s.add, k("1"), s.tanh, k("0.79788456080286535588"), k("0.044715"));
    case PwOp::relu: return fmt::format("({0} < {1}(0) ? {1}(0) : {0})", a, s.F);
    case PwOp::rsqrt: return fmt::format("{}({}, {}({}))", s.div, k("1"), s.sqrt, a);
    case PwOp::reciprocal: return fmt::format("{}({}, {})", s.div, k("1"), a);
    case PwOp::copy: return a;  // a dtype conversion: the rounding around it does the work
    case PwOp::pow: return pow_spelled(s, a, in.c);
    default: break;
  }
  return "";
}

std::string op_expr(const Spelling& s, const PwInstr& in) {
  std::string e = spelled(s, in);
  if (e.empty()) invalid_usage("pointwise codegen: instruction {} has no spelling", int(in.op));
  return e;
}

struct Compiled {
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
};

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}

std::map<std::string, Compiled>& cache() {
  static auto* c = new std::map<std::string, Compiled>();  // libraries live until exit
  return *c;
}

#define SF_NVRTC_CHECK(call)                                                                \
  do {                                                                                      \
    nvrtcResult sf_r_ = (call);                                                             \
    if (sf_r_ != NVRTC_SUCCESS)                                                             \
      ::symmflow::throw_error(::symmflow::ErrorCode::Cuda, "{} failed: {}", #call,          \
                              nvrtcGetErrorString(sf_r_));                                  \
  } while (0)

Compiled compile(const std::string& source, const std::string& arch) {
  nvrtcProgram prog;
  SF_NVRTC_CHECK(nvrtcCreateProgram(&prog, source.c_str(), "symmflow_pointwise.cu", 0, nullptr,
                                    nullptr));
  std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> guard(&prog, [](nvrtcProgram* p) {
    nvrtcDestroyProgram(p);
  });
  const std::string arch_flag = "--gpu-architecture=" + arch;
  const char* options[] = {arch_flag.c_str(), "--std=c++17"};
  nvrtcResult r = nvrtcCompileProgram(prog, 2, options);
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(prog, log.data());
    throw_error(ErrorCode::Cuda,
                "pointwise codegen: NVRTC could not compile a pointwise program ({}):\n{}\n{}",
                nvrtcGetErrorString(r), log, source);
  }
  size_t size = 0;
  SF_NVRTC_CHECK(nvrtcGetCUBINSize(prog, &size));
  std::string cubin(size, '\0');
  SF_NVRTC_CHECK(nvrtcGetCUBIN(prog, cubin.data()));
  Compiled c;
  SF_CUDA_CHECK(cudaLibraryLoadData(&c.library, cubin.data(), nullptr, nullptr, 0, nullptr,
                                    nullptr, 0));
  SF_CUDA_CHECK(cudaLibraryGetKernel(&c.kernel, c.library, "pw"));
  return c;
}

// The current GPU's architecture ("sm_90"), cached per thread and device.
const std::string& current_arch() {
  static thread_local int cached = -1;
  static thread_local std::string arch;
  int device = 0, major = 0, minor = 0;
  SF_CUDA_CHECK(cudaGetDevice(&device));
  if (device != cached) {
    SF_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    SF_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    arch = fmt::format("sm_{}{}", major, minor);
    cached = device;
  }
  return arch;
}

// What the source depends on, as bytes (cheaper than printing the source on every launch).
std::string cache_key(const PwProgram& p, const std::string& arch, bool vectorized) {
  std::string key = arch;
  key.push_back(char(p.wide));
  key.push_back(char(vectorized));
  for (int o = 0; o < p.n_operands; ++o) key.push_back(char(p.operands[o].type));
  key.push_back('|');
  if (!p.contiguous) {  // the shape and strides are in the text
    auto put = [&](int64_t x) { key.append(reinterpret_cast<const char*>(&x), sizeof x); };
    put(p.ndim);
    for (int d = 0; d < p.ndim; ++d) put(p.sizes[d]);
    for (int o = 0; o < p.n_operands; ++o) {
      for (int d = 0; d < p.ndim; ++d) put(p.operands[o].strides[d]);
    }
  }
  for (int k = 0; k < p.n_instrs; ++k) {
    const PwInstr& in = p.code[k];
    const char fields[] = {char(in.op), char(in.dst), char(in.a), char(in.b), char(in.round)};
    key.append(fields, sizeof fields);
    key.append(reinterpret_cast<const char*>(&in.c), sizeof in.c);
  }
  return key;
}

// For a strided program: statements that split element i into its coordinates x<d> (dims of
// size 1 skipped) and the offset expression of each operand ("i" where it is laid out
// contiguously over the shape).
// The coordinates are 32-bit when the element count fits: a 64-bit division, even by a
// constant, is a long instruction sequence on GPUs, a 32-bit one a multiply and a shift (the
// shape is in the cache key, so the choice is too).
std::string index_code(const PwProgram& p, std::vector<std::string>& offsets) {
  const bool narrow = p.numel <= int64_t(0x7fffffff);
  const char* type = narrow ? "u32" : "i64";
  const char* suffix = narrow ? "U" : "LL";
  std::string code = fmt::format("    {0} rest = {0}(i);\n", type);
  for (int d = p.ndim - 1; d >= 0; --d) {
    if (p.sizes[d] == 1) continue;
    code += fmt::format("    const {0} x{1} = rest % {2}{3};\n    rest /= {2}{3};\n", type, d,
                        p.sizes[d], suffix);
  }
  offsets.assign(size_t(p.n_operands), "i");
  for (int o = 0; o < p.n_operands; ++o) {
    std::string terms;
    int64_t dense = 1;
    bool contiguous = true;
    for (int d = p.ndim - 1; d >= 0; --d) {
      const int64_t stride = p.operands[o].strides[d];
      if (p.sizes[d] == 1) continue;
      contiguous = contiguous && stride == dense;
      dense *= p.sizes[d];
      if (stride == 0) continue;
      terms += fmt::format("{}i64(x{}) * {}LL", terms.empty() ? "" : " + ", d, stride);
    }
    if (!contiguous) offsets[size_t(o)] = terms.empty() ? "0" : "(" + terms + ")";
  }
  return code;
}

}  // namespace

namespace {

// The C type an operand is stored as in the text.
const char* stored_type(PwType t) {
  switch (t) {
    case PwType::f32: return "float";
    case PwType::f64: return "double";
    case PwType::bf16: case PwType::f16: return "u16";
    case PwType::i32: return "int";
    case PwType::i64: return "i64";
    case PwType::i8: return "signed char";
    case PwType::u32: return "u32";
    case PwType::boolean: return "bool";
  }
  return "char";
}

int stored_size(PwType t) {
  switch (t) {
    case PwType::f64: case PwType::i64: return 8;
    case PwType::f32: case PwType::i32: case PwType::u32: return 4;
    case PwType::bf16: case PwType::f16: return 2;
    default: return 1;
  }
}

// The statements of one element: `at(o)` is the lvalue of operand o's element, `reg` names a
// register. Registers are declared by the caller.
std::string element_code(const PwProgram& p, const Spelling& s,
                         const std::function<std::string(int)>& at, const char* indent) {
  std::string out;
  for (int k = 0; k < p.n_instrs; ++k) {
    const PwInstr& in = p.code[k];
    if (in.op == PwOp::load) {
      out += fmt::format("{}r{} = {};\n", indent, in.dst,
                         rounded(s, in.round, load_expr(s, p.operands[in.a].type, at(in.a))));
    } else if (in.op == PwOp::store) {
      out += indent + store_stmt(p.operands[in.a].type, at(in.a), fmt::format("r{}", in.b)) + "\n";
    } else {
      out += fmt::format("{}r{} = {};\n", indent, in.dst, rounded(s, in.round, op_expr(s, in)));
    }
  }
  return out;
}

std::string register_decls(const PwProgram& p, const Spelling& s, const char* indent) {
  int regs = 1;  // registers named by instructions (a load's `a` and a store's `a` are operands)
  for (int k = 0; k < p.n_instrs; ++k) {
    const PwInstr& in = p.code[k];
    if (in.op != PwOp::store) regs = std::max(regs, in.dst + 1);
    if (in.op != PwOp::load && in.op != PwOp::store) regs = std::max({regs, in.a + 1, in.b + 1});
  }
  std::string out = fmt::format("{}{} r0", indent, s.F);
  for (int r = 1; r < regs; ++r) out += fmt::format(", r{}", r);
  return out + ";\n";
}

// Note [vectorized pointwise]: a contiguous program whose operands are all aligned to kVec
// elements (checked at launch) runs a kernel where each thread loads kVec consecutive elements of
// every operand at once (one 4-, 8-, 16- or 32-byte access: a struct of kVec elements aligned to
// its size), computes them one by one with the same statements, and stores them at once; the
// elements past the last whole vector run the scalar loop. 16-bit operands read 2 bytes per
// thread per access otherwise, and the element-wise kernels of a prefill ran at 2.3-2.7 TB/s on
// an H200 (inductor's, vectorized: about 4). Same statements, same bits.
constexpr int kVec = 4;

bool is_loaded(const PwProgram& p, int operand) {
  for (int k = 0; k < p.n_instrs; ++k) {
    if (p.code[k].op == PwOp::load && p.code[k].a == operand) return true;
  }
  return false;
}

std::string vector_body(const PwProgram& p, const Spelling& s) {
  std::string out;
  for (int o = 0; o < p.n_operands; ++o) {
    const PwType t = p.operands[o].type;
    out += fmt::format("struct __align__({}) V{} {{ {} v[{}]; }};\n", stored_size(t) * kVec, o,
                       stored_type(t), kVec);
  }
  out += "extern \"C\" __global__ void __launch_bounds__(256)\n";
  out += "pw(const __grid_constant__ Args a) {\n";
  out += "  const i64 step = i64(gridDim.x) * blockDim.x;\n";
  out += fmt::format("  const i64 vectors = a.numel / {};\n", kVec);
  out += "  for (i64 q = i64(blockIdx.x) * blockDim.x + threadIdx.x; q < vectors; q += step) {\n";
  for (int o = 0; o < p.n_operands; ++o) {
    out += is_loaded(p, o) ? fmt::format("    V{0} v{0} = ((const V{0}*)a.data[{0}])[q];\n", o)
                           : fmt::format("    V{0} v{0};\n", o);
  }
  out += fmt::format("#pragma unroll\n    for (int e = 0; e < {}; ++e) {{\n", kVec);
  out += register_decls(p, s, "      ");
  out += element_code(p, s, [](int o) { return fmt::format("v{}.v[e]", o); }, "      ");
  out += "    }\n";
  for (int o = 0; o < p.n_operands; ++o) {
    bool stored = false;
    for (int k = 0; k < p.n_instrs; ++k) stored = stored || (p.code[k].op == PwOp::store && p.code[k].a == o);
    if (stored) out += fmt::format("    ((V{0}*)a.data[{0}])[q] = v{0};\n", o);
  }
  out += "  }\n";
  out += fmt::format("  for (i64 i = vectors * {} + i64(blockIdx.x) * blockDim.x + threadIdx.x; "
                     "i < a.numel; i += step) {{\n",
                     kVec);
  out += register_decls(p, s, "    ");
  out += element_code(
      p, s,
      [&](int o) { return fmt::format("(({}*)a.data[{}])[i]", stored_type(p.operands[o].type), o); },
      "    ");
  out += "  }\n}\n";
  return out;
}

}  // namespace

std::string pointwise_source(const PwProgram& p, bool vectorized) {
  const Spelling& s = p.wide ? kDouble : kFloat;
  std::string out = kPrelude;
  if (vectorized) {
    SF_CHECK(p.contiguous, "pointwise codegen: only a contiguous program is vectorized");
    return out + vector_body(p, s);
  }
  out += "extern \"C\" __global__ void __launch_bounds__(256)\n";
  out += "pw(const __grid_constant__ Args a) {\n";
  out += "  const i64 step = i64(gridDim.x) * blockDim.x;\n";
  out += "  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < a.numel; i += step) {\n";
  std::vector<std::string> offsets(size_t(p.n_operands), "i");
  if (!p.contiguous) out += index_code(p, offsets);
  auto at = [&](int operand) {  // the element of operand at this index
    return fmt::format("(({}*)a.data[{}])[{}]", stored_type(p.operands[operand].type), operand,
                       offsets[size_t(operand)]);
  };
  out += register_decls(p, s, "    ");
  out += element_code(p, s, at, "    ");
  out += "  }\n}\n";
  return out;
}

// Whether codegen spells an op: asked of spelled() once per op (a plan's launch asks per run);
// an op past the table (one added after `copy`) counts as unspelled, so it runs interpreted.
static bool spells(PwOp op) {
  constexpr size_t kOps = size_t(PwOp::copy) + 1;
  static const std::array<bool, kOps> table = [] {
    std::array<bool, kOps> t{};
    for (size_t i = 0; i < kOps; ++i) {
      PwInstr in;
      in.op = PwOp(i);
      t[i] = in.op == PwOp::load || in.op == PwOp::store || !spelled(kFloat, in).empty();
    }
    return t;
  }();
  return size_t(op) < kOps && table[size_t(op)];
}

bool pointwise_compilable(const PwProgram& p) {
  for (int k = 0; k < p.n_instrs; ++k) {
    if (!spells(p.code[k].op)) return false;
  }
  return true;
}

std::atomic<int64_t>& launches() {
  static std::atomic<int64_t> n{0};
  return n;
}

// Note [vectorized pointwise]: whether every operand's address is aligned to kVec elements.
static bool vector_aligned(const PwProgram& p) {
  if (!p.contiguous || p.numel < kVec) return false;
  for (int o = 0; o < p.n_operands; ++o) {
    const auto bytes = uintptr_t(stored_size(p.operands[o].type) * kVec);
    if (reinterpret_cast<uintptr_t>(p.operands[o].data) % bytes != 0) return false;
  }
  return true;
}

void launch_compiled_pointwise(const PwProgram& p, void* stream) {
  if (p.numel == 0) return;
  launches().fetch_add(1, std::memory_order_relaxed);
  const std::string& arch = current_arch();
  const bool vectorized = vector_aligned(p);
  const std::string key = cache_key(p, arch, vectorized);
  Compiled c;
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto it = cache().find(key);
    if (it == cache().end()) {
      it = cache().emplace(key, compile(pointwise_source(p, vectorized), arch)).first;
    }
    c = it->second;
  }
  Args args;
  args.numel = p.numel;
  for (int o = 0; o < p.n_operands; ++o) args.data[o] = p.operands[o].data;
  const int threads = 256;
  const int64_t work = vectorized ? p.numel / kVec : p.numel;
  const int64_t want = (work + threads - 1) / threads;
  const unsigned blocks = unsigned(want < 8192 ? want : 8192);
  void* params[] = {&args};
  SF_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(c.kernel), dim3(blocks),
                                 dim3(threads), params, 0, static_cast<cudaStream_t>(stream)));
}

int64_t compiled_pointwise_launches() { return launches().load(std::memory_order_relaxed); }

int compiled_pointwise_kernels() {
  std::lock_guard<std::mutex> lock(cache_mutex());
  return int(cache().size());
}

}  // namespace symmflow::cuda
