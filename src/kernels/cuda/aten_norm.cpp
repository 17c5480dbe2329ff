// cuda kernels of aten::rms_norm and aten::_softmax (+ out), on the row kernels of norm.cu.
// Inputs that are not contiguous are first copied contiguous; 16-bit floats accumulate in float.
#include "kernels/cuda/norm.hpp"
#include "kernels/cuda/program.hpp"
#include "ops/aten/meta.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

Tensor contiguous_on_gpu(const Tensor& t) { return t.is_contiguous() ? t : aten::clone(t); }

void rms_norm_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& input = call.arg("input").to_tensor();
  aten_meta::RmsNormInfo info = aten_meta::rms_norm_info(
      op, input, call.arg("normalized_shape"), call.arg("weight"), call.arg("eps"));
  check_float(op, input.dtype());
  Tensor x = contiguous_on_gpu(input);
  std::optional<Tensor> weight = call.arg("weight").to_optional_tensor();
  Tensor w = weight ? contiguous_on_gpu(*weight) : Tensor();
  const Tensor& out = call.out(0);
  const int64_t rows = info.inner == 0 ? 0 : input.numel() / info.inner;
  SF_CUDA_CHECK(cudaError_t(launch_rms_norm(
      x.raw_data(), pw_type(x.dtype()), weight ? w.raw_data() : nullptr,
      weight ? pw_type(w.dtype()) : PwType::f32, out.raw_data(), pw_type(out.dtype()), rows,
      info.inner, info.eps, current_stream())));
}

Kernel softmax_kernel(bool out_variant) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const Tensor& self = call.arg("self").to_tensor();
    aten_meta::SoftmaxInfo info =
        aten_meta::softmax_info(op, self, call.arg("dim"), call.arg("half_to_float"));
    check_float(op, self.dtype());
    const Tensor& dst = out_variant ? call.arg("out").to_tensor() : call.out(0);
    if (out_variant) aten_meta::check_out(op, "out", dst, info.spec, /*exact_dtype=*/true);
    Tensor x = contiguous_on_gpu(self);
    const int64_t outer = info.outer, n = info.n, inner = info.inner;
    Tensor y = dst.is_contiguous()
                   ? dst
                   : Tensor::uninitialized(dst.shape(), dst.dtype(), dst.device());
    SF_CUDA_CHECK(cudaError_t(launch_softmax(x.raw_data(), pw_type(x.dtype()), y.raw_data(),
                                             pw_type(y.dtype()), outer, n, inner,
                                             current_stream())));
    if (y.raw_data() != dst.raw_data()) aten::copy_(dst, y);
  };
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cuda, m) {
  m.impl("rms_norm", rms_norm_kernel);
  m.impl("_softmax", softmax_kernel(false));
  m.impl("_softmax.out", softmax_kernel(true));
}

}  // namespace symmflow::cuda
