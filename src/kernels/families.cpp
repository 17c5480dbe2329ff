// Contract in families.hpp.
#include "kernels/families.hpp"

#include <string>
#include <tuple>
#include <utility>

namespace symmflow::kernels {

using aten_meta::BinaryOp;
using aten_meta::UnaryOp;

void register_pointwise_kernels(Library& m, BinaryKernelFactory binary, UnaryKernelFactory unary) {
  for (auto [name, kind, has_alpha] :
       {std::tuple{"add", BinaryOp::add, true}, std::tuple{"sub", BinaryOp::sub, true},
        std::tuple{"mul", BinaryOp::mul, false}, std::tuple{"div", BinaryOp::div, false}}) {
    const std::string n = name;
    m.impl(n + ".Tensor", binary(kind, has_alpha, ""));
    m.impl(n + ".Scalar", binary(kind, has_alpha, ""));
    m.impl(n + ".out", binary(kind, has_alpha, "out"));
    m.impl(n + "_.Tensor", binary(kind, has_alpha, "self"));
  }
  for (UnaryOp kind : aten_meta::kAllUnaryOps) {
    const std::string n = aten_meta::unary_name(kind);
    m.impl(n, unary(kind, ""));
    m.impl(n + "_", unary(kind, "self"));
    if (kind != UnaryOp::relu) m.impl(n + ".out", unary(kind, "out"));
  }
}

void register_matmul_kernels(Library& m, MatmulKernelFactory mm, AddmmKernelFactory addmm) {
  m.impl("mm", mm(false, ""));
  m.impl("mm.out", mm(false, "out"));
  m.impl("bmm", mm(true, ""));
  m.impl("bmm.out", mm(true, "out"));
  m.impl("addmm", addmm(""));
  m.impl("addmm.out", addmm("out"));
  m.impl("addmm_", addmm("self"));
}

void register_reduction_kernels(Library& m, ReduceKernelFactory reduce, Kernel rms_norm,
                                SoftmaxKernelFactory softmax) {
  m.impl("sum.dim_IntList", reduce(false, false));
  m.impl("sum.IntList_out", reduce(false, true));
  m.impl("mean.dim", reduce(true, false));
  m.impl("mean.out", reduce(true, true));
  m.impl("rms_norm", std::move(rms_norm));
  m.impl("_softmax", softmax(false));
  m.impl("_softmax.out", softmax(true));
}

}  // namespace symmflow::kernels
