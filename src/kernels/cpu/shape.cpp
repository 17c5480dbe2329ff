// CPU kernels of the aten view, copy, cat and factory ops.
//  - view, reshape, slice.Tensor, t, transpose.int: kernels/views.hpp (the same on every backend).
//  - clone (and lift_fresh_copy), _to_copy, copy_: dtype-converting strided copies (copy_
//    broadcasts src and snapshots it first when it overlaps self).
//  - cat (+ out): kernels/views.hpp (the same on every backend).
//  - empty/zeros/full (+ out): fill the destination (the dispatcher's outputs are zeroed already;
//    zeros still fills so that out variants and reused buffers are right).
#include "kernels/cpu/common.hpp"
#include "kernels/views.hpp"
#include "ops/aten/meta.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

void clone_kernel(KernelCall& call) { copy_into(call.out(0), call.arg("self").to_tensor()); }

void copy_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  const Tensor& src = call.arg("src").to_tensor();
  aten_meta::check_copy(call.op.name(), self, src);
  copy_from(self, src);
}

void zeros_kernel(KernelCall& call) { fill(call.out(0), Value(int64_t(0))); }

void full_kernel(KernelCall& call) { fill(call.out(0), call.arg("fill_value")); }

Kernel fill_out_kernel(bool zeros) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    Shape shape = aten_meta::factory_size(op, call.arg("size"));
    const Tensor& out = call.arg("out").to_tensor();
    aten_meta::check_out(op, "out", out, TensorSpec{out.dtype(), shape});
    fill(out, zeros ? Value(int64_t(0)) : call.arg("fill_value"));
  };
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cpu, m) {
  kernels::register_view_kernels(m);
  m.impl("clone", clone_kernel);
  m.impl("lift_fresh_copy", clone_kernel);
  m.impl("_to_copy", clone_kernel);
  m.impl("copy_", copy_kernel);
  m.impl("empty.memory_format", [](KernelCall&) {});  // the dispatcher allocated it
  m.impl("zeros", zeros_kernel);
  m.impl("zeros.out", fill_out_kernel(true));
  m.impl("full", full_kernel);
  m.impl("full.out", fill_out_kernel(false));
}

}  // namespace symmflow::cpu
