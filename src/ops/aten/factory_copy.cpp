// aten factories and copies: empty.memory_format, zeros (+ out), full (+ out), clone,
// lift_fresh_copy, copy_, _to_copy. Factories default to f32 (full infers from its fill value:
// bool, i64 or f32); layout, device, pin_memory and memory_format are accepted and ignored
// (outputs are contiguous). _to_copy is tagged pointwise (Note [op tags]).
#include "ops/aten/meta.hpp"

namespace symmflow {
namespace {

using aten_meta::Args;

DType fill_dtype(const Value& fill) {
  if (fill.is_bool()) return DType::boolean;
  if (fill.is_int()) return DType::i64;
  return DType::f32;
}

std::vector<TensorSpec> factory(const Args& a, DType default_dtype) {
  DType dtype = a["dtype"].to_optional_dtype().value_or(default_dtype);
  return {TensorSpec{dtype, aten_meta::factory_size(a.op(), a["size"])}};
}

std::vector<TensorSpec> factory_out(const Args& a) {
  Shape shape = aten_meta::factory_size(a.op(), a["size"]);
  const Tensor& out = a.tensor("out");
  aten_meta::check_out(a.op(), "out", out, TensorSpec{out.dtype(), shape});
  return {};
}

}  // namespace

SYMMFLOW_LIBRARY(aten, m) {
  aten_meta::def(m,
                 "empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? "
                 "layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? "
                 "memory_format=None) -> Tensor",
                 [](const Args& a) { return factory(a, DType::f32); });
  aten_meta::def(m,
                 "zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? "
                 "device=None, bool? pin_memory=None) -> Tensor",
                 [](const Args& a) { return factory(a, DType::f32); });
  aten_meta::def(m, "zeros.out(SymInt[] size, *, Tensor(a!) out) -> ()", factory_out);
  aten_meta::def(m,
                 "full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? "
                 "layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
                 [](const Args& a) {
                   SF_CHECK(a["fill_value"].is_number(), "{}: fill_value must be a Scalar, got {}",
                            a.op(), a["fill_value"].kind_name());
                   return factory(a, fill_dtype(a["fill_value"]));
                 });
  aten_meta::def(m, "full.out(SymInt[] size, Scalar fill_value, *, Tensor(a!) out) -> ()",
                 factory_out);
  aten_meta::def(m, "clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor",
                 [](const Args& a) {
                   const Tensor& self = a.tensor("self");
                   return std::vector<TensorSpec>{TensorSpec{self.dtype(), self.shape()}};
                 });
  // A copy of a constant that torch.compile lifts into the graph (as clone, for symmflow).
  aten_meta::def(m, "lift_fresh_copy(Tensor self) -> Tensor", [](const Args& a) {
    const Tensor& self = a.tensor("self");
    return std::vector<TensorSpec>{TensorSpec{self.dtype(), self.shape()}};
  });
  aten_meta::def(m, "copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> ()",
                 [](const Args& a) {
                   aten_meta::check_copy(a.op(), a.tensor("self"), a.tensor("src"));
                   return std::vector<TensorSpec>{};
                 });
  aten_meta::def(m,
                 "_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? "
                 "device=None, bool? pin_memory=None, bool non_blocking=False, MemoryFormat? "
                 "memory_format=None) -> Tensor",
                 [](const Args& a) {
                   const Tensor& self = a.tensor("self");
                   DType dtype = a["dtype"].to_optional_dtype().value_or(self.dtype());
                   return std::vector<TensorSpec>{TensorSpec{dtype, self.shape()}};
                 });
  // Elementwise (one operand): fuse_pointwise fuses it where it is a float-to-float dtype change
  // with device, layout and memory_format None (Note [fused casts and broadcasts]).
  m.tag("_to_copy", {Tag::pointwise});
}

}  // namespace symmflow
