// aten pointwise ops (add ... div, sin ... neg, rsqrt, reciprocal, pow.Tensor_Scalar, rsub.Scalar,
// clamp): schemas (PyTorch's native_functions, mutating ops returning `()`) and shape functions.
// Binary ops broadcast and promote like PyTorch; out/in-place variants validate their written
// argument and return nothing. Every variant of the families is tagged pointwise (Note [op tags]).
#include "ops/aten/meta.hpp"

namespace symmflow {
namespace {

using aten_meta::Args;
using aten_meta::BinaryOp;
using aten_meta::UnaryOp;

std::vector<TensorSpec> binary_fn(const Args& a, BinaryOp kind, bool has_alpha) {
  Value none;
  return {aten_meta::binary_spec(a.op(), kind, a.tensor("self"), a["other"],
                                 has_alpha ? a["alpha"] : none)};
}

std::vector<TensorSpec> binary_out_fn(const Args& a, BinaryOp kind, bool has_alpha,
                                      const char* written) {
  TensorSpec spec = binary_fn(a, kind, has_alpha)[0];
  aten_meta::check_out(a.op(), written, a.tensor(written), spec);
  return {};
}

void def_binary(Library& m, const char* name, BinaryOp kind, bool has_alpha) {
  std::string alpha_kw = has_alpha ? ", *, Scalar alpha=1" : "";
  std::string alpha_pos = has_alpha ? ", Scalar alpha=1" : "";
  std::string out_kw = has_alpha ? ", *, Scalar alpha=1, Tensor(a!) out" : ", *, Tensor(a!) out";
  aten_meta::def(m, fmt::format("{}.Tensor(Tensor self, Tensor other{}) -> Tensor", name, alpha_kw),
                 [=](const Args& a) { return binary_fn(a, kind, has_alpha); });
  aten_meta::def(m, fmt::format("{}.Scalar(Tensor self, Scalar other{}) -> Tensor", name, alpha_pos),
                 [=](const Args& a) { return binary_fn(a, kind, has_alpha); });
  aten_meta::def(m, fmt::format("{}.out(Tensor self, Tensor other{}) -> ()", name, out_kw),
                 [=](const Args& a) { return binary_out_fn(a, kind, has_alpha, "out"); });
  aten_meta::def(m,
                 fmt::format("{}_.Tensor(Tensor(a!) self, Tensor other{}) -> ()", name, alpha_kw),
                 [=](const Args& a) { return binary_out_fn(a, kind, has_alpha, "self"); });
  for (const char* overload : {".Tensor", ".Scalar", ".out", "_.Tensor"})
    m.tag(fmt::format("{}{}", name, overload), {Tag::pointwise});
}

std::vector<TensorSpec> unary_fn(const Args& a, UnaryOp kind) {
  return {aten_meta::unary_spec(a.op(), kind, a.tensor("self"))};
}

// `extra` is the schema text of extra kwarg-only args (gelu's approximate).
void def_unary(Library& m, UnaryOp kind, bool has_out, const std::string& extra = "") {
  const char* name = aten_meta::unary_name(kind);
  std::string kw = extra.empty() ? "" : ", *, " + extra;
  auto check_extra = [kind](const Args& a) {
    if (kind == UnaryOp::gelu) aten_meta::gelu_is_tanh(a.op(), a["approximate"]);
  };
  aten_meta::def(m, fmt::format("{}(Tensor self{}) -> Tensor", name, kw), [=](const Args& a) {
    check_extra(a);
    return unary_fn(a, kind);
  });
  aten_meta::def(m, fmt::format("{}_(Tensor(a!) self{}) -> ()", name, kw), [=](const Args& a) {
    check_extra(a);
    aten_meta::check_out(a.op(), "self", a.tensor("self"), unary_fn(a, kind)[0]);
    return std::vector<TensorSpec>{};
  });
  m.tag(name, {Tag::pointwise});
  m.tag(fmt::format("{}_", name), {Tag::pointwise});
  if (!has_out) return;
  std::string out_kw = extra.empty() ? ", *, Tensor(a!) out" : ", *, " + extra + ", Tensor(a!) out";
  aten_meta::def(m, fmt::format("{}.out(Tensor self{}) -> ()", name, out_kw), [=](const Args& a) {
    check_extra(a);
    aten_meta::check_out(a.op(), "out", a.tensor("out"), unary_fn(a, kind)[0]);
    return std::vector<TensorSpec>{};
  });
  m.tag(fmt::format("{}.out", name), {Tag::pointwise});
}

}  // namespace

SYMMFLOW_LIBRARY(aten, m) {
  def_binary(m, "add", BinaryOp::add, true);
  def_binary(m, "sub", BinaryOp::sub, true);
  def_binary(m, "mul", BinaryOp::mul, false);
  def_binary(m, "div", BinaryOp::div, false);

  def_unary(m, UnaryOp::sin, true);
  def_unary(m, UnaryOp::cos, true);
  def_unary(m, UnaryOp::exp, true);
  def_unary(m, UnaryOp::tanh, true);
  def_unary(m, UnaryOp::relu, false);  // PyTorch has no relu.out
  def_unary(m, UnaryOp::gelu, true, "str approximate='none'");
  def_unary(m, UnaryOp::silu, true);
  def_unary(m, UnaryOp::sigmoid, true);
  def_unary(m, UnaryOp::neg, true);
  def_unary(m, UnaryOp::rsqrt, true);
  def_unary(m, UnaryOp::reciprocal, true);  // 1 / x; ints and bool in f32, as PyTorch
  // Tagged pointwise, as rsub below: fused regions hold them (the GPU's spell pow with its special
  // exponents and rsub as sub with the operands swapped, as their kernels do: exec/cuda/fused.cpp),
  // so RMSNorm's and SiLU's backward chains take a pass over memory fewer each.
  aten_meta::def(m, "pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor", [](const Args& a) {
    return std::vector<TensorSpec>{
        aten_meta::pow_scalar_spec(a.op(), a.tensor("self"), a["exponent"])};
  });
  m.tag("pow.Tensor_Scalar", {Tag::pointwise});
  // other - alpha * self: a graph's `number - tensor` (sub.Tensor with a number for self, as the
  // decomposed silu backward has it) imports as this.
  aten_meta::def(m, "rsub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
                 [](const Args& a) {
                   return std::vector<TensorSpec>{aten_meta::binary_spec(
                       a.op(), BinaryOp::sub, a.tensor("self"), a["other"], a["alpha"])};
                 });
  m.tag("rsub.Scalar", {Tag::pointwise});
  // PyTorch's result type of self and the bounds given; not tagged pointwise (the GPU's fused
  // regions have no instruction for it).
  aten_meta::def(m, "clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
                 [](const Args& a) {
                   const Tensor& self = a.tensor("self");
                   SF_CHECK(!a["min"].is_none() || !a["max"].is_none(),
                            "{}: torch.clamp: At least one of 'min' or 'max' must not be None",
                            a.op());
                   std::vector<aten_meta::Operand> operands{aten_meta::operand_of(self)};
                   for (const char* bound : {"min", "max"}) {
                     if (!a[bound].is_none()) operands.push_back(aten_meta::operand_of(a[bound]));
                   }
                   return std::vector<TensorSpec>{
                       TensorSpec{aten_meta::result_type(operands), self.shape()}};
                 });
}

}  // namespace symmflow
