// Example plugin: an op of its own and a rewrite pattern that puts it into graphs written with
// plain aten ops.
//
//   myops::bias_gelu(Tensor input, Tensor bias) -> Tensor
//     out = gelu(input + bias), bias of shape [N] (N = the last dim of input) added to every row,
//     exact gelu (approximate='none'); the sum is rounded to the dtype, as aten::add.Tensor does,
//     so the op is bitwise the composition aten::gelu(aten::add.Tensor(input, bias)).
//   pattern myops::fuse_bias_gelu (root aten::gelu): that composition becomes one bias_gelu call
//     when the sum has no other use, alpha is 1 and the shapes and dtypes fit.
//
// The pattern runs in the pipeline's rewrite_patterns slot, right after functionalize
// (Note [plugin rewrite patterns] in include/symmflow/passes/rewrite_patterns.hpp; docs/plugins.md):
//   symmflow compile examples/custom_op/bias_gelu.sf --print-after rewrite_patterns
//     --plugin build/release/lib/libmyops.so
//
// Build: part of the symmflow build (build/<preset>/lib/libmyops.so); cpu kernel only.
// Use:   symmflow ops --plugin build/release/lib/libmyops.so --namespace myops
#include <algorithm>
#include <cmath>
#include <numbers>

#include "symmflow/ops/library.hpp"
#include "symmflow/passes/rewrite_patterns.hpp"

namespace {

using symmflow::DType;
using symmflow::Shape;
using symmflow::Tensor;
using symmflow::Value;
namespace ir = symmflow::ir;

std::vector<symmflow::TensorSpec> bias_gelu_shape(std::span<const Value> args) {
  const Tensor& input = args[0].to_tensor();
  const Tensor& bias = args[1].to_tensor();
  SF_CHECK(symmflow::is_floating(input.dtype()) && input.dim() >= 1,
           "myops::bias_gelu: input {} must be a floating tensor of at least one dim", input.str());
  SF_CHECK(bias.dtype() == input.dtype() && bias.shape() == Shape{input.shape().back()},
           "myops::bias_gelu: bias {} must be {}[{}] (the last dim of input {})", bias.str(),
           symmflow::dtype_name(input.dtype()), input.shape().back(), input.str());
  return {{input.dtype(), input.shape()}};
}

// gelu exactly as the cpu aten kernel computes it, in the accumulation type A.
template <typename A>
A gelu(A x) {
  return A(0.5) * x * (A(1) + std::erf(x * A(1 / std::numbers::sqrt2)));
}

template <typename T>
void bias_gelu_rows(const T* x, const T* bias, T* out, int64_t rows, int64_t n) {
  using A = symmflow::acc_t<T>;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      const T sum = T(A(x[r * n + j]) + A(bias[j]));  // rounded, as aten::add.Tensor
      out[r * n + j] = T(gelu(A(sum)));
    }
  }
}

void bias_gelu_cpu(symmflow::KernelCall& call) {
  const Tensor input = call.arg("input").to_tensor().contiguous();
  const Tensor bias = call.arg("bias").to_tensor().contiguous();
  const Tensor& out = call.out(0);  // fresh and contiguous (allocated by the dispatcher)
  const int64_t n = input.shape().back();
  const int64_t rows = n == 0 ? 0 : input.numel() / n;
  symmflow::visit_dtype(input.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, symmflow::Half> ||
                  std::is_same_v<T, symmflow::BFloat16>) {
      bias_gelu_rows<T>(static_cast<const T*>(input.raw_data()),
                        static_cast<const T*>(bias.raw_data()), static_cast<T*>(out.raw_data()),
                        rows, n);
    }
  });
}

const ir::Arg* arg(const ir::Node& n, std::string_view name) {
  int i = n.op()->schema().arg_index(name);
  return i < 0 ? nullptr : &n.args()[size_t(i)];
}

// The pattern: y = aten::gelu(s) with s = aten::add.Tensor(x, bias) (or (bias, x)) becomes
// y = myops::bias_gelu(x, bias). Returns false, touching nothing, unless every condition holds.
bool fuse_bias_gelu(ir::Graph& g, ir::Node& gelu) {
  const ir::Arg* self = arg(gelu, "self");
  const ir::Arg* approximate = arg(gelu, "approximate");
  if (self->kind != ir::Arg::Kind::value || !approximate->literal.is_string() ||
      approximate->literal.to_string() != "none")
    return false;
  ir::Value* s = self->value;
  ir::Node* add = s->producer();
  if (!add || add->kind() != ir::NodeKind::op || add->op()->name() != "aten::add.Tensor" ||
      s->uses().size() != 1 ||
      std::find(g.outputs().begin(), g.outputs().end(), s) != g.outputs().end())
    return false;
  const ir::Arg* lhs = arg(*add, "self");
  const ir::Arg* rhs = arg(*add, "other");
  const ir::Arg* alpha = arg(*add, "alpha");
  if (lhs->kind != ir::Arg::Kind::value || rhs->kind != ir::Arg::Kind::value ||
      !alpha->literal.is_number() || alpha->literal.to_double() != 1.0)
    return false;
  const ir::TensorType& st = s->type();
  ir::Value* x = lhs->value;
  ir::Value* bias = rhs->value;
  if (x->type() != st) std::swap(x, bias);
  if (st.shape.empty() || !symmflow::is_floating(st.dtype) || x->type() != st ||
      bias->type() != ir::TensorType{st.dtype, Shape{st.shape.back()}})
    return false;
  const std::string name = gelu.output()->name();
  ir::Node* fused = g.add_op("myops::bias_gelu", {ir::Arg::of(x), ir::Arg::of(bias)}, {}, "", &gelu);
  fused->set_loc(gelu.loc());
  g.replace_uses(gelu.output(), fused->output());
  g.erase(&gelu);
  g.erase(add);
  g.rename(fused->output(), name);
  return true;
}

}  // namespace

SYMMFLOW_LIBRARY(myops, m) {
  m.def("bias_gelu(Tensor input, Tensor bias) -> Tensor", bias_gelu_shape);
}

SYMMFLOW_LIBRARY_IMPL(myops, cpu, m) { m.impl("bias_gelu", bias_gelu_cpu); }

SYMMFLOW_REWRITE_PATTERN(myops, fuse_bias_gelu, "aten::gelu", fuse_bias_gelu,
                         "aten::gelu(aten::add.Tensor(x, bias)) becomes myops::bias_gelu(x, bias)");
