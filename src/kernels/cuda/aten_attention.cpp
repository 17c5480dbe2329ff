// cuda kernels of aten::embedding and aten::scaled_dot_product_attention, on attention.cu. Inputs
// that are not contiguous are first copied contiguous on the GPU; i32 indices are widened to i64.
// Floating dtypes only (f32, bf16, f16, f64). Checks are the CPU's (aten_meta), except that an
// out-of-range embedding index cannot be raised from the GPU: its row comes out as NaN.
// Attention refuses a key length whose scores do not fit in 48 KiB of shared memory (12288 keys
// in float), naming it.
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/program.hpp"
#include "ops/aten/meta.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

constexpr int64_t kMaxSharedBytes = 48 * 1024;

Tensor contiguous_on_gpu(const Tensor& t) { return t.is_contiguous() ? t : aten::clone(t); }

// `dst` itself when contiguous, else a contiguous temporary that finish_into copies into dst.
Tensor contiguous_destination(const Tensor& dst) {
  return dst.is_contiguous() ? dst : Tensor::uninitialized(dst.shape(), dst.dtype(), dst.device());
}
void finish_into(const Tensor& dst, const Tensor& y) {
  if (y.raw_data() != dst.raw_data()) aten::copy_(dst, y);
}

void embedding_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& weight = call.arg("weight").to_tensor();
  const Tensor& indices = call.arg("indices").to_tensor();
  aten_meta::embedding_spec(op, weight, indices, call.arg("padding_idx"),
                            call.arg("scale_grad_by_freq"), call.arg("sparse"));
  check_float(op, weight.dtype());
  Tensor idx = indices;
  if (idx.dtype() != DType::i64 || !idx.is_contiguous()) {
    idx = Tensor::uninitialized(indices.shape(), DType::i64, indices.device());
    aten::copy_(idx, indices);
  }
  Tensor w = contiguous_on_gpu(weight);
  const Tensor& dst = call.out(0);
  Tensor y = contiguous_destination(dst);
  SF_CUDA_CHECK(cudaError_t(launch_embedding(w.raw_data(), pw_type(w.dtype()),
                                             static_cast<const int64_t*>(idx.raw_data()),
                                             y.raw_data(), idx.numel(), weight.shape()[0],
                                             weight.shape()[1], current_stream())));
  finish_into(dst, y);
}

void sdpa_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& query = call.arg("query").to_tensor();
  const Tensor& key = call.arg("key").to_tensor();
  const Tensor& value = call.arg("value").to_tensor();
  aten_meta::SdpaInfo info = aten_meta::sdpa_info(
      op, query, key, value, call.arg("attn_mask"), call.arg("dropout_p"), call.arg("is_causal"),
      call.arg("scale"), call.arg("enable_gqa"));
  check_float(op, query.dtype());
  const int64_t shared = attention_shared_bytes(info.kv_len, query.dtype() == DType::f64);
  SF_CHECK(shared <= kMaxSharedBytes,
           "{}: key length {} is too long for the cuda kernel (its scores need {} bytes of shared "
           "memory, at most {})",
           op, info.kv_len, shared, kMaxSharedBytes);
  Tensor q = contiguous_on_gpu(query), k = contiguous_on_gpu(key), v = contiguous_on_gpu(value);
  const Tensor& dst = call.out(0);
  Tensor y = contiguous_destination(dst);
  SF_CUDA_CHECK(cudaError_t(launch_attention(
      q.raw_data(), k.raw_data(), v.raw_data(), y.raw_data(), pw_type(q.dtype()), info.batch,
      info.heads, info.kv_heads, info.q_len, info.kv_len, info.head_dim, info.v_dim, info.causal,
      info.scale, current_stream())));
  finish_into(dst, y);
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cuda, m) {
  m.impl("embedding", embedding_kernel);
  m.impl("scaled_dot_product_attention", sdpa_kernel);
}

}  // namespace symmflow::cuda
