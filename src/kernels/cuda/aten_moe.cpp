// cuda kernels of the MoE routing ops (ops/aten/moe.cpp): topk, sort, sort.stable (moe.cu's line
// sorts, Note [sort order]), div.Tensor_mode / div.Scalar_mode (elementwise.cu, Note [div rounding
// modes]), histc and _grouped_mm (moe.cu), empty_permuted (the dispatcher allocated it). Types and
// checks come from aten_meta, as on the CPU, and results equal the CPU kernels' (sort, topk, div,
// histc exactly; _grouped_mm up to the summation order). Nothing reads device memory on the host,
// so every op can be captured into a CUDA graph; the scratch of a strided input or of topk of
// k < n over lines longer than kSortSharedMax is a graph allocation there (Note [scratch inside a
// capture] in cuda_memory.hpp). The
// GPU does not check what only device data tells: an integer division by zero gives 0, histc of a
// range from data with NaN gives zero counts, _grouped_mm's offs are not validated (a row belongs
// to the first group whose end is past it); the CPU raises on each.
#include "kernels/cuda/pointwise/elementwise.hpp"
#include "kernels/cuda/moe.hpp"
#include "kernels/cuda/pointwise/program.hpp"
#include "ops/aten/meta_moe.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

Tensor contiguous_on_gpu(const Tensor& t) { return t.is_contiguous() ? t : aten::clone(t); }

// `dst` itself when contiguous, else a temporary that finish() copies into it.
struct Dense {
  Tensor dst, t;
  explicit Dense(const Tensor& d)
      : dst(d), t(d.is_contiguous() ? d : Tensor::uninitialized(d.shape(), d.dtype(), d.device())) {}
  void finish() const {
    if (t.raw_data() != dst.raw_data()) aten::copy_(dst, t);
  }
};

// ---- topk / sort --------------------------------------------------------------------------------

void sort_lines(const std::string& op, const Tensor& self, const aten_meta::SortInfo& info,
                const Tensor& values_out, const Tensor& indices_out) {
  check_on_gpu(op, self);
  Tensor x = contiguous_on_gpu(self);
  Dense values(values_out), indices(indices_out);
  SortLines s;
  s.type = pw_type(self.dtype());
  s.elem_size = int(dtype_size(self.dtype()));
  s.lines = info.outer * info.inner;
  s.n = info.n;
  s.inner = info.inner;
  s.k = info.k;
  s.descending = info.descending;
  if (info.n <= kSortSharedMax) {
    s.x = x.raw_data();
    s.values = values.t.raw_data();
    s.indices = static_cast<int64_t*>(indices.t.raw_data());
    SF_CUDA_CHECK(cudaError_t(launch_sort_lines_small(s, current_stream())));
  } else if (info.k == info.n) {  // sorted in place in the outputs
    aten::copy_(values.t, x);
    s.values = values.t.raw_data();
    s.indices = static_cast<int64_t*>(indices.t.raw_data());
    SF_CUDA_CHECK(cudaError_t(launch_sort_lines_global(s, current_stream())));
  } else {  // every line sorted in a scratch pair, the first k copied out
    Tensor sv = aten::clone(x);
    Tensor si = Tensor::uninitialized(x.shape(), DType::i64, x.device());
    s.values = sv.raw_data();
    s.indices = static_cast<int64_t*>(si.raw_data());
    SF_CUDA_CHECK(cudaError_t(launch_sort_lines_global(s, current_stream())));
    const Shape& shape = values.t.shape();
    Strides strides = x.strides();
    aten::copy_(values.t, sv.as_strided(shape, strides, 0));
    aten::copy_(indices.t, si.as_strided(shape, strides, 0));
  }
  values.finish();
  indices.finish();
}

// ---- div with a rounding mode -------------------------------------------------------------------

void div_mode_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  const Value& other = call.arg("other");
  aten_meta::DivModeInfo info =
      aten_meta::div_mode_info(op, self, other, call.arg("rounding_mode"));
  const Tensor& out = call.out(0);
  SF_CHECK(out.dim() <= kPwMaxDims, "{}: {} dimensions (the cuda kernel takes {})", op, out.dim(),
           kPwMaxDims);
  ElemArgs a;
  a.out = out.raw_data();
  a.out_type = pw_type(out.dtype());
  a.ndim = int(out.dim());
  a.numel = out.numel();
  a.compute = pw_type(info.spec.dtype);  // operands rounded to the result type, as PyTorch casts
  // Note [div rounding modes]: only the reduced floats take a Scalar divisor in float; f64 keeps
  // it in double.
  a.scalar_in_float = info.spec.dtype == DType::bf16 || info.spec.dtype == DType::f16;
  for (size_t d = 0; d < out.shape().size(); ++d) {
    a.sizes[d] = out.shape()[d];
    a.out_strides[d] = out.strides()[d];
  }
  const Tensor* inputs[] = {&self, other.is_tensor() ? &other.to_tensor() : nullptr};
  for (size_t n = 0; n < 2; ++n) {
    if (!inputs[n]) continue;
    const Tensor& t = *inputs[n];
    check_on_gpu(op, t);
    a.in[n].data = t.raw_data();
    a.in[n].type = pw_type(t.dtype());
    const size_t lead = out.shape().size() - t.shape().size();
    for (size_t k = 0; k < t.shape().size(); ++k) {
      a.in[n].strides[lead + k] = t.shape()[k] == 1 ? 0 : t.strides()[k];
    }
  }
  if (!other.is_tensor()) {
    a.c0 = other.to_double();
    if (!is_floating(info.spec.dtype)) {  // an integer Scalar wraps to the result dtype first
      Tensor s = Tensor::empty({}, info.spec.dtype);
      store_double(s.view(), 0, double(other.to_int()));
      a.i0 = info.spec.dtype == DType::i64 ? other.to_int() : int64_t(load_double(s.view(), 0));
    }
  }
  const ElemOp kind = info.mode == aten_meta::RoundingMode::floor   ? ElemOp::div_floor
                      : info.mode == aten_meta::RoundingMode::trunc ? ElemOp::div_trunc
                                                                    : ElemOp::div_true;
  SF_CUDA_CHECK(cudaError_t(launch_elementwise(kind, a, current_stream())));
}

// ---- histc and _grouped_mm ----------------------------------------------------------------------

void histc_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  aten_meta::HistcInfo info =
      aten_meta::histc_info(op, self, call.arg("bins"), call.arg("min"), call.arg("max"));
  check_on_gpu(op, self);
  Tensor x = contiguous_on_gpu(self);
  Dense out(call.out(0));
  HistcArgs a;
  a.x = x.raw_data();
  a.out = out.t.raw_data();
  a.type = pw_type(self.dtype());
  a.numel = x.numel();
  a.bins = info.bins;
  a.lo = info.min;
  a.hi = info.max;
  a.from_data = info.from_data;
  SF_CUDA_CHECK(cudaError_t(launch_histc(a, current_stream())));
  out.finish();
}

void grouped_mm_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  const Tensor& mat2 = call.arg("mat2").to_tensor();
  aten_meta::GroupedMmInfo info = aten_meta::grouped_mm_info(
      op, self, mat2, call.arg("offs"), call.arg("bias"), call.arg("out_dtype"));
  const Tensor& offs_arg = call.arg("offs").to_tensor();
  for (const Tensor* t : {&self, &mat2, &offs_arg}) check_on_gpu(op, *t);
  Tensor offs = contiguous_on_gpu(offs_arg);
  Dense out(call.out(0));
  GroupedMmArgs a;
  a.a = self.raw_data();
  a.b = mat2.raw_data();
  a.offs = offs.raw_data();
  a.offs_i64 = offs.dtype() == DType::i64;
  a.out = out.t.raw_data();
  a.type = pw_type(self.dtype());
  a.rows = info.rows;
  a.k = info.k;
  a.n = info.n;
  a.groups = info.groups;
  for (int d = 0; d < 2; ++d) a.a_strides[d] = self.strides()[size_t(d)];
  for (int d = 0; d < 3; ++d) a.b_strides[d] = mat2.strides()[size_t(d)];
  SF_CUDA_CHECK(cudaError_t(launch_grouped_mm(a, current_stream())));
  out.finish();
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cuda, m) {
  auto topk = [](KernelCall& call) {
    const Tensor& self = call.arg("self").to_tensor();
    aten_meta::SortInfo info = aten_meta::topk_info(call.op.name(), self, call.arg("k"),
                                                    call.arg("dim"), call.arg("largest"));
    sort_lines(call.op.name(), self, info, call.out(0), call.out(1));
  };
  auto sort = [](KernelCall& call) {
    const Tensor& self = call.arg("self").to_tensor();
    aten_meta::SortInfo info =
        aten_meta::sort_info(call.op.name(), self, call.arg("dim"), call.arg("descending"));
    sort_lines(call.op.name(), self, info, call.out(0), call.out(1));
  };
  m.impl("topk", topk);
  m.impl("sort", sort);
  m.impl("sort.stable", sort);
  m.impl("div.Tensor_mode", div_mode_kernel);
  m.impl("div.Scalar_mode", div_mode_kernel);
  m.impl("histc", histc_kernel);
  m.impl("empty_permuted", [](KernelCall&) {});  // the dispatcher allocated it
  m.impl("_grouped_mm", grouped_mm_kernel);
}

}  // namespace symmflow::cuda
