// A fused pointwise region (fuse_pointwise) on the GPU: the body becomes one pointwise program
// (Note [pointwise programs] in kernels/cuda/pointwise/pointwise.cu) that loads each region input once,
// computes every body op in registers, rounding each to its value's dtype as op-by-op execution
// would, and stores the region's outputs: one kernel, one pass over memory, compiled for the
// region at run time (Note [pointwise codegen]) unless SYMMFLOW_CUDA_POINTWISE_CODEGEN=0.
// Note [fused casts and broadcasts] (passes/fuse_pointwise.cpp): a dtype conversion (_to_copy) is
// a `copy` instruction rounded to its result's dtype; a region with an input smaller than the
// region (broadcast) or strided (a permute) runs as a program over the region's shape that loads
// that input by its strides, 0 on its broadcast dims (compiled with the shape and strides in its
// text, Note [pointwise codegen]); every other region runs flat.
#include "exec/cuda/fused.hpp"

#include <algorithm>
#include <map>

#include "kernels/cuda/pointwise/program.hpp"

namespace symmflow::cuda {

namespace {

using aten_meta::BinaryOp;
using aten_meta::UnaryOp;

std::optional<BinaryOp> binary_of(std::string_view base) {
  if (base == "add") return BinaryOp::add;
  if (base == "sub") return BinaryOp::sub;
  if (base == "mul") return BinaryOp::mul;
  if (base == "div") return BinaryOp::div;
  return std::nullopt;
}

std::optional<UnaryOp> unary_of(std::string_view base) {
  for (UnaryOp k : aten_meta::kAllUnaryOps) {
    if (base == aten_meta::unary_name(k)) return k;
  }
  return std::nullopt;
}

Tensor flat(const Tensor& t, int64_t numel) {
  SF_CHECK(t.is_contiguous() && t.numel() == numel,
           "cuda fused region: tensor {} must be contiguous with {} elements", t.str(), numel);
  return t.as_strided({numel}, {1}, 0);
}

}  // namespace

void run_fused(const ir::Graph& body, std::span<const Tensor> inputs,
               std::span<const Tensor> outputs) {
  SF_CHECK(!outputs.empty(), "cuda fused region: no outputs");
  const int64_t numel = outputs[0].numel();
  if (numel == 0) return;
  const bool shaped = std::any_of(inputs.begin(), inputs.end(), [&](const Tensor& t) {
    return t.numel() != numel || !t.is_contiguous();
  });
  auto operand = [&](const Tensor& t, bool is_input) {
    if (!shaped) return flat(t, numel);
    SF_CHECK(is_input || (t.is_contiguous() && t.shape() == outputs[0].shape()),
             "cuda fused region: output {} must be contiguous of shape {}", t.str(),
             shape_str(outputs[0].shape()));
    return t;  // an input: ProgramBuilder::operand takes its strides (0 where it broadcasts)
  };
  ProgramBuilder b(shaped ? outputs[0].shape() : Shape{numel});
  std::map<const ir::Value*, int> reg;
  std::map<const ir::Value*, size_t> last_use;
  for (size_t k = 0; k < body.nodes().size(); ++k) {
    for (const ir::Value* v : body.nodes()[k]->inputs()) last_use[v] = k;
  }
  for (const ir::Value* v : body.outputs()) last_use[v] = body.nodes().size();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Value* v = body.inputs()[i];
    if (last_use.count(v)) reg[v] = b.load(operand(inputs[i], true), v->type().dtype);
  }
  for (size_t k = 0; k < body.nodes().size(); ++k) {
    const ir::Node* n = body.nodes()[k];
    const std::string& name = n->op()->name();
    // The aten op's base name picks its instruction; other namespaces have none.
    const FunctionSchema& schema = n->op()->schema();
    const std::string_view base = schema.ns == "aten" ? std::string_view(schema.name) : name;
    const DType dtype = n->output()->type().dtype;
    const auto& args = n->args();
    auto arg_reg = [&](size_t i) -> std::pair<int, bool> {  // (register, made here)
      if (args[i].kind == ir::Arg::Kind::value) return {reg.at(args[i].value), false};
      return {b.konst(args[i].literal.to_double(), dtype), true};
    };
    int out = 0;
    if (auto bin = binary_of(base)) {
      auto [x, x_tmp] = arg_reg(0);
      auto [y, y_tmp] = arg_reg(1);
      Value alpha = args.size() > 2 ? args[2].literal : Value();
      out = emit_binary(b, *bin, x, y, alpha, dtype);
      if (x_tmp) b.release(x);
      if (y_tmp) b.release(y);
    } else if (auto un = unary_of(base)) {
      bool tanh_gelu = false;
      if (*un == UnaryOp::gelu) {
        int a = n->op()->schema().arg_index("approximate");
        tanh_gelu = a >= 0 && aten_meta::gelu_is_tanh(name, args[size_t(a)].literal);
      }
      const int x = reg.at(args[0].value);
      out = b.op(unary_instr(*un, tanh_gelu), x, x, dtype);
    } else if (name == "aten::pow.Tensor_Scalar") {
      // The exponent in the compute type, as the kernel converts it (pow_scalar_kernel).
      double e = args[1].literal.to_double();
      if (dtype != DType::f64) e = double(float(e));
      const int x = reg.at(args[0].value);
      out = b.op(PwOp::pow, x, x, dtype, e);
    } else if (name == "aten::rsub.Scalar") {  // other - alpha * self, as rsub_kernel spells it
      const int x = reg.at(args[0].value);
      const int y = b.konst(args[1].literal.to_double(), dtype);
      out = emit_binary(b, BinaryOp::sub, y, x, args[2].literal, dtype);
      b.release(y);
    } else if (base == "_to_copy") {  // fuse_pointwise fuses it as a float dtype change only
      const int x = reg.at(args[0].value);
      out = b.op(PwOp::copy, x, x, dtype);
    } else {
      invalid_usage("cuda fused region: {} is not a pointwise op the GPU fuses", name);
    }
    for (const ir::Value* v : n->inputs()) {
      auto it = reg.find(v);
      if (it != reg.end() && last_use[v] == k) {
        b.release(it->second);
        reg.erase(it);
      }
    }
    reg[n->output()] = out;
  }
  for (size_t r = 0; r < outputs.size(); ++r)
    b.store(operand(outputs[r], false), reg.at(body.outputs()[r]));
  b.launch_compiled();
}

}  // namespace symmflow::cuda
