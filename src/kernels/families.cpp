// Contract in families.hpp.
#include "kernels/families.hpp"

#include <string>
#include <tuple>
#include <utility>

namespace symmflow::kernels {

using aten_meta::BinaryOp;
using aten_meta::UnaryOp;

namespace {

// m.impl, then the kernel's check when one is given.
struct Registrar {
  Library& m;
  const KernelCheck& check;
  void operator()(const std::string& name, Kernel kernel) const {
    m.impl(name, std::move(kernel));
    if (check) m.kernel_check(name, check);
  }
};

}  // namespace

void register_pointwise_kernels(Library& lib, BinaryKernelFactory binary, UnaryKernelFactory unary,
                                const KernelCheck& check) {
  Registrar m_impl{lib, check};
  for (auto [name, kind, has_alpha] :
       {std::tuple{"add", BinaryOp::add, true}, std::tuple{"sub", BinaryOp::sub, true},
        std::tuple{"mul", BinaryOp::mul, false}, std::tuple{"div", BinaryOp::div, false}}) {
    const std::string n = name;
    m_impl(n + ".Tensor", binary(kind, has_alpha, ""));
    m_impl(n + ".Scalar", binary(kind, has_alpha, ""));
    m_impl(n + ".out", binary(kind, has_alpha, "out"));
    m_impl(n + "_.Tensor", binary(kind, has_alpha, "self"));
  }
  for (UnaryOp kind : aten_meta::kAllUnaryOps) {
    const std::string n = aten_meta::unary_name(kind);
    m_impl(n, unary(kind, ""));
    m_impl(n + "_", unary(kind, "self"));
    if (kind != UnaryOp::relu) m_impl(n + ".out", unary(kind, "out"));
  }
}

void register_matmul_kernels(Library& lib, MatmulKernelFactory mm, AddmmKernelFactory addmm,
                             const KernelCheck& check) {
  Registrar m_impl{lib, check};
  m_impl("mm", mm(false, ""));
  m_impl("mm.out", mm(false, "out"));
  m_impl("bmm", mm(true, ""));
  m_impl("bmm.out", mm(true, "out"));
  m_impl("addmm", addmm(""));
  m_impl("addmm.out", addmm("out"));
  m_impl("addmm_", addmm("self"));
}

void register_reduction_kernels(Library& lib, ReduceKernelFactory reduce, Kernel rms_norm,
                                SoftmaxKernelFactory softmax, const KernelCheck& check) {
  Registrar m_impl{lib, check};
  m_impl("sum.dim_IntList", reduce(false, false));
  m_impl("sum.IntList_out", reduce(false, true));
  m_impl("mean.dim", reduce(true, false));
  m_impl("mean.out", reduce(true, true));
  m_impl("rms_norm", std::move(rms_norm));
  m_impl("_softmax", softmax(false, false));
  m_impl("_softmax.out", softmax(false, true));
  m_impl("_log_softmax", softmax(true, false));
  m_impl("_log_softmax.out", softmax(true, true));
}

}  // namespace symmflow::kernels
