// aten reductions and normalizations: sum.dim_IntList, mean.dim, amax, rms_norm, native_layer_norm
// (three results: out, mean, rstd), _softmax and _log_softmax (with out variants, amax without).
// Integral sums give i64 unless dtype= is given; mean, the norms and the softmaxes need floats.
#include "ops/aten/meta.hpp"
#include "ops/aten/meta_multi.hpp"

namespace symmflow {
namespace {

using aten_meta::Args;

TensorSpec reduce(const Args& a, bool is_mean) {
  return aten_meta::reduce_info(a.op(), a.tensor("self"), a["dim"], a["keepdim"], a["dtype"], is_mean)
      .spec;
}

TensorSpec softmax(const Args& a) {
  return aten_meta::softmax_info(a.op(), a.tensor("self"), a["dim"], a["half_to_float"]).spec;
}

std::vector<TensorSpec> written(const Args& a, const TensorSpec& spec) {
  aten_meta::check_out(a.op(), "out", a.tensor("out"), spec, /*exact_dtype=*/true);
  return {};
}

}  // namespace

SYMMFLOW_LIBRARY(aten, m) {
  aten_meta::def(m,
                 "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, "
                 "ScalarType? dtype=None) -> Tensor",
                 [](const Args& a) { return std::vector<TensorSpec>{reduce(a, false)}; });
  aten_meta::def(m,
                 "sum.IntList_out(Tensor self, int[1]? dim, bool keepdim=False, *, "
                 "ScalarType? dtype=None, Tensor(a!) out) -> ()",
                 [](const Args& a) { return written(a, reduce(a, false)); });
  aten_meta::def(m,
                 "mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, "
                 "ScalarType? dtype=None) -> Tensor",
                 [](const Args& a) { return std::vector<TensorSpec>{reduce(a, true)}; });
  aten_meta::def(m,
                 "mean.out(Tensor self, int[1]? dim, bool keepdim=False, *, "
                 "ScalarType? dtype=None, Tensor(a!) out) -> ()",
                 [](const Args& a) { return written(a, reduce(a, true)); });
  aten_meta::def(m,
                 "rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, "
                 "float? eps=None) -> Tensor",
                 [](const Args& a) {
                   return std::vector<TensorSpec>{
                       aten_meta::rms_norm_info(a.op(), a.tensor("input"), a["normalized_shape"],
                                                a["weight"], a["eps"])
                           .spec};
                 });
  aten_meta::def(m,
                 "native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, "
                 "Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)",
                 [](const Args& a) {
                   aten_meta::LayerNormInfo info = aten_meta::layer_norm_info(
                       a.op(), a.tensor("input"), a["normalized_shape"], a["weight"], a["bias"],
                       a["eps"]);
                   return std::vector<TensorSpec>{info.out, info.stats, info.stats};
                 });
  aten_meta::def(m, "amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
                 [](const Args& a) {
                   return std::vector<TensorSpec>{
                       aten_meta::amax_info(a.op(), a.tensor("self"), a["dim"], a["keepdim"]).spec};
                 });
  aten_meta::def(m, "_softmax(Tensor self, int dim, bool half_to_float) -> Tensor",
                 [](const Args& a) { return std::vector<TensorSpec>{softmax(a)}; });
  aten_meta::def(m,
                 "_softmax.out(Tensor self, int dim, bool half_to_float, *, Tensor(a!) out) -> ()",
                 [](const Args& a) { return written(a, softmax(a)); });
  aten_meta::def(m, "_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor",
                 [](const Args& a) { return std::vector<TensorSpec>{softmax(a)}; });
  aten_meta::def(m,
                 "_log_softmax.out(Tensor self, int dim, bool half_to_float, *, Tensor(a!) out) -> "
                 "()",
                 [](const Args& a) { return written(a, softmax(a)); });
}

}  // namespace symmflow
