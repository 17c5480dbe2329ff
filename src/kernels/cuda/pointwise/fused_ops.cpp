// cuda kernels of the `fused` namespace (Note [fused compute ops] in ops/fused/rotary_embedding.cpp):
// fused::rotary_embedding on rotary.cu's kernel, its operands read in place through their strides
// (a permuted q or k, cos and sin broadcast over the heads), so nothing is allocated and the step
// runs inside a CUDA graph capture as it is.
#include "kernels/cuda/pointwise/program.hpp"
#include "kernels/cuda/pointwise/rotary.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

void rotary_embedding_kernel(KernelCall& call) {
  constexpr std::string_view op = "fused::rotary_embedding";
  const Tensor& x = call.arg("x").to_tensor();
  const Tensor& cos = call.arg("cos").to_tensor();
  const Tensor& sin = call.arg("sin").to_tensor();
  const Tensor& out = call.out(0);
  check_float(op, x.dtype());
  for (const Tensor* t : {&x, &cos, &sin, &out}) check_on_gpu(op, *t);
  const Shape& shape = x.shape();
  SF_CHECK(shape.size() <= size_t(kPwMaxDims), "{}: x ({}) has more than {} dims", op, x.str(),
           kPwMaxDims);
  RotaryArgs a;
  a.x = x.raw_data();
  a.cos = cos.raw_data();
  a.sin = sin.raw_data();
  a.out = out.raw_data();
  a.nd = int(shape.size());
  a.numel = x.numel();
  a.type = pw_type(x.dtype());
  auto strides_of = [&](const Tensor& t, int64_t* to) {
    const size_t lead = shape.size() - t.shape().size();
    for (size_t d = 0; d < t.shape().size(); ++d)
      to[lead + d] = t.shape()[d] == 1 ? 0 : t.strides()[d];
  };
  for (size_t d = 0; d < shape.size(); ++d) a.shape[d] = shape[d];
  strides_of(x, a.x_strides);
  strides_of(cos, a.cos_strides);
  strides_of(sin, a.sin_strides);
  strides_of(out, a.out_strides);
  SF_CUDA_CHECK(cudaError_t(launch_rotary(a, current_stream())));
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(fused, cuda, m) {
  m.impl("rotary_embedding", rotary_embedding_kernel);
  m.kernel_check("rotary_embedding", float_only);
}

}  // namespace symmflow::cuda
