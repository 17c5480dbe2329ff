// aten matrix products: mm, addmm, bmm (with their out variants and addmm_). Operands must share
// one dtype (no promotion, as in PyTorch); inner and batch dimensions must agree.
#include "ops/aten/meta.hpp"

namespace symmflow {
namespace {

using aten_meta::Args;

std::vector<TensorSpec> written(const Args& a, const char* arg, const TensorSpec& spec) {
  aten_meta::check_out(a.op(), arg, a.tensor(arg), spec, /*exact_dtype=*/true);
  return {};
}

TensorSpec mm(const Args& a) { return aten_meta::mm_spec(a.op(), a.tensor("self"), a.tensor("mat2")); }
TensorSpec bmm(const Args& a) { return aten_meta::bmm_spec(a.op(), a.tensor("self"), a.tensor("mat2")); }
TensorSpec addmm(const Args& a) {
  return aten_meta::addmm_spec(a.op(), a.tensor("self"), a.tensor("mat1"), a.tensor("mat2"),
                               a["beta"], a["alpha"]);
}

}  // namespace

SYMMFLOW_LIBRARY(aten, m) {
  aten_meta::def(m, "mm(Tensor self, Tensor mat2) -> Tensor",
                 [](const Args& a) { return std::vector<TensorSpec>{mm(a)}; });
  aten_meta::def(m, "mm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> ()",
                 [](const Args& a) { return written(a, "out", mm(a)); });
  aten_meta::def(m,
                 "addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) "
                 "-> Tensor",
                 [](const Args& a) { return std::vector<TensorSpec>{addmm(a)}; });
  aten_meta::def(m,
                 "addmm.out(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, "
                 "Scalar alpha=1, Tensor(a!) out) -> ()",
                 [](const Args& a) { return written(a, "out", addmm(a)); });
  aten_meta::def(m,
                 "addmm_(Tensor(a!) self, Tensor mat1, Tensor mat2, *, Scalar beta=1, "
                 "Scalar alpha=1) -> ()",
                 [](const Args& a) { return written(a, "self", addmm(a)); });
  aten_meta::def(m, "bmm(Tensor self, Tensor mat2) -> Tensor",
                 [](const Args& a) { return std::vector<TensorSpec>{bmm(a)}; });
  aten_meta::def(m, "bmm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> ()",
                 [](const Args& a) { return written(a, "out", bmm(a)); });
}

}  // namespace symmflow
