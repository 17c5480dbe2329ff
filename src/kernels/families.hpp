// Op families whose variants every backend registers the same way: a backend gives one kernel
// factory per family, called for each variant with the argument that variant writes ("" for the
// functional op, "out" for the out variant, "self" for the in-place one). Each backend's
// SYMMFLOW_LIBRARY_IMPL block calls these, so the variant lists live in one place.
#pragma once

#include "ops/aten/meta.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::kernels {

using BinaryKernelFactory = Kernel (*)(aten_meta::BinaryOp kind, bool has_alpha,
                                       const char* written);
using UnaryKernelFactory = Kernel (*)(aten_meta::UnaryOp kind, const char* written);
// add, sub, mul, div (.Tensor, .Scalar, .out, _.Tensor) and sin ... neg, rsqrt, reciprocal (with _ and .out;
// relu has no .out).
// Each register_* function declares `check` (when given) for every kernel it registers (Note
// [kernel checks] in ops/registry.hpp).
void register_pointwise_kernels(Library& m, BinaryKernelFactory binary, UnaryKernelFactory unary,
                                const KernelCheck& check = {});

using MatmulKernelFactory = Kernel (*)(bool batched, const char* written);
using AddmmKernelFactory = Kernel (*)(const char* written);
// mm, bmm (+ .out), addmm (+ .out, addmm_).
void register_matmul_kernels(Library& m, MatmulKernelFactory mm, AddmmKernelFactory addmm,
                             const KernelCheck& check = {});

using ReduceKernelFactory = Kernel (*)(bool is_mean, bool out_variant);
// `log`: log_softmax (x - max - log(sum of exp(x - max))) rather than softmax.
using SoftmaxKernelFactory = Kernel (*)(bool log, bool out_variant);
// sum.dim_IntList, mean.dim (+ .IntList_out, .out), rms_norm, _softmax and _log_softmax (+ .out).
void register_reduction_kernels(Library& m, ReduceKernelFactory reduce, Kernel rms_norm,
                                SoftmaxKernelFactory softmax, const KernelCheck& check = {});

}  // namespace symmflow::kernels
