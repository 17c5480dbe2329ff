// cuda kernels of aten::embedding and aten::scaled_dot_product_attention, on attention.cu. They
// read their inputs in place through strides wherever the layout allows (the weight of embedding:
// any; q, k, v: any layout that can be seen as [batch, heads, len, dim], such as the permuted views
// of a decoder block), so that a plan's step allocates nothing and can be captured into a CUDA
// graph; other layouts (leading dims that do not merge, non-contiguous indices) are copied
// contiguous first (eager use). Floating dtypes only (f32, bf16, f16, f64). Checks are the CPU's
// (aten_meta), except that an out-of-range embedding index cannot be raised from the GPU: its row
// comes out as NaN. Attention runs cuDNN's fused kernels or the own kernel, whichever measures
// faster per shape (Note [measured kernel choice]; masks: Note [cudnn masks]). The own kernel
// takes any key length (Note [attention tiles] in attention.cu) and
// refuses head dims whose rows of q, k and v do not fit in 48 KiB of shared memory less 256 bytes;
// its backward refuses a key length whose scores and their gradients do not fit there (6112 keys
// in float, 3056 in f64), naming it. scaled_dot_product_attention_backward: Note [attention
// backward].
#include "kernels/cuda/attention/attention.hpp"
#include "kernels/cuda/attention/attention_bias.hpp"
#include "kernels/cuda/attention/cudnn_attention.hpp"
#include "kernels/cuda/choice/kernel_choice.hpp"
#include "kernels/cuda/pointwise/program.hpp"
#include "ops/aten/meta.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::cuda {
namespace {

// The 48 KiB a block may use without opting in, less room for the kernel's static reductions.
constexpr int64_t kMaxSharedBytes = 48 * 1024 - 256;

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
  Tensor idx = contiguous_on_gpu(indices);
  const Tensor& dst = call.out(0);
  Tensor y = contiguous_destination(dst);
  SF_CUDA_CHECK(cudaError_t(launch_embedding(
      weight.raw_data(), pw_type(weight.dtype()), weight.strides()[0], weight.strides()[1],
      idx.raw_data(), idx.dtype() == DType::i32, y.raw_data(), idx.numel(), weight.shape()[0],
      weight.shape()[1], current_stream())));
  finish_into(dst, y);
}

// `t` seen as [batch, heads, len, dim] through its strides, or a contiguous copy when its leading
// dims do not merge into one.
AttentionOperand operand_of(const Tensor& t, int64_t batch, Tensor& keep) {
  const Shape& s = t.shape();
  const size_t r = s.size();
  const Shape four = {batch, s[r - 3], s[r - 2], s[r - 1]};
  std::optional<Strides> strides = aten_meta::compute_view_strides(s, t.strides(), four);
  keep = t;
  if (!strides) {
    keep = aten::clone(t);
    strides = contiguous_strides(four);
  }
  AttentionOperand o;
  o.data = keep.raw_data();
  for (size_t d = 0; d < 4; ++d) o.strides[d] = (*strides)[d];
  return o;
}

// The mask of Note [attention masks] (ops/aten/meta_attention.cpp) as [batch, heads, L, S]
// broadcast strides, read in place when its leading dims merge (always for 4-D scores), else
// through a contiguous copy of its broadcast.
AttentionMask mask_of(const Tensor& mask, const aten_meta::SdpaInfo& info, Tensor& keep) {
  AttentionMask m;
  const Shape& full = info.scores_shape;
  Strides st(full.size(), 0);
  const size_t off = full.size() - mask.shape().size();
  for (size_t d = 0; d < mask.shape().size(); ++d)
    st[off + d] = mask.shape()[d] == 1 ? 0 : mask.strides()[d];
  const size_t r = full.size();
  keep = mask;
  std::optional<Strides> four = aten_meta::compute_view_strides(
      full, st, Shape{info.batch, full[r - 3], full[r - 2], full[r - 1]});
  if (!four) {
    keep = aten::clone(mask.as_strided(full, st, 0));
    four = contiguous_strides(Shape{info.batch, full[r - 3], full[r - 2], full[r - 1]});
  }
  m.data = keep.raw_data();
  m.is_bool = info.mask_is_bool;
  m.type = info.mask_is_bool ? PwType::boolean : pw_type(mask.dtype());
  for (size_t d = 0; d < 4; ++d) m.strides[d] = (*four)[d];
  return m;
}

SdpaShape shape_of(const aten_meta::SdpaInfo& info, DType dtype, const AttentionOperand& q,
                   const AttentionOperand& k, const AttentionOperand& v) {
  return SdpaShape{pw_type(dtype), info.batch,    info.heads,  info.kv_heads, info.q_len,
                   info.kv_len,    info.head_dim, info.v_dim,  info.causal,   info.scale,
                   q,              k,             v};
}

// Note [cudnn masks] (cudnn_attention.cpp): the bias geometry of `m` (broadcast strides over
// [B, H, L, S]), and the bias written from it on the current stream.
void set_bias_shape(SdpaShape& s, const AttentionMask& m) {
  s.bias_batch = m.strides[0] == 0 ? 1 : s.batch;
  s.bias_heads = m.strides[1] == 0 ? 1 : s.heads;
  s.bias_row = (s.kv_len + 7) / 8 * 8;
}
Tensor make_bias(const SdpaShape& s, const AttentionMask& m, const Tensor& like) {
  Tensor b = Tensor::uninitialized({s.bias_batch, s.bias_heads, s.q_len, s.bias_row},
                                   like.dtype(), like.device());
  SF_CUDA_CHECK(cudaError_t(launch_mask_to_bias(m, b.raw_data(), s.type, s.bias_batch,
                                                s.bias_heads, s.q_len, s.kv_len, s.bias_row,
                                                current_stream())));
  return b;
}
void fix_masked_rows(const SdpaShape& s, const Tensor& stats, void* o, bool for_backward) {
  SF_CUDA_CHECK(cudaError_t(launch_fix_masked_rows(static_cast<float*>(stats.raw_data()), o,
                                                   s.type, s.batch * s.heads * s.q_len, s.v_dim,
                                                   for_backward, current_stream())));
}

// The key of Note [measured kernel choice]: what decides which kernel is faster.
std::string choice_key(const aten_meta::SdpaInfo& info, DType dtype) {
  return fmt::format("{} b{} h{}/{} l{} s{} e{}/{}{}{} cudnn{}", dtype_name(dtype), info.batch,
                     info.heads, info.kv_heads, info.q_len, info.kv_len, info.head_dim,
                     info.v_dim, info.causal ? " causal" : "", info.has_mask ? " mask" : "",
                     cudnn_version());
}

// Runs the chosen candidate; InvalidUsage listing every refusal when none can run the call.
void run_chosen(std::string_view op, const std::string& key,
                const std::vector<KernelCandidate>& candidates,
                const std::vector<RefusedKernel>& refused) {
  if (candidates.empty()) {
    std::string why;
    for (const RefusedKernel& r : refused) why += fmt::format("; {}: {}", r.name, r.why);
    SF_CHECK(false, "{}: no cuda kernel runs this call ({}){}", op, key, why);
  }
  candidates[choose_kernel(op, key, candidates, refused)].run();
}

// Note [measured kernel choice] between cuDNN (Note [cudnn attention]) and symmflow's own kernel
// (Note [attention tiles] in attention.cu); masks: Note [cudnn masks].
void sdpa_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& query = call.arg("query").to_tensor();
  const Tensor& key = call.arg("key").to_tensor();
  const Tensor& value = call.arg("value").to_tensor();
  aten_meta::SdpaInfo info = aten_meta::sdpa_info(
      op, query, key, value, call.arg("attn_mask"), call.arg("dropout_p"), call.arg("is_causal"),
      call.arg("scale"), call.arg("enable_gqa"));
  check_float(op, query.dtype());
  const bool wide = query.dtype() == DType::f64;
  const int64_t tile = attention_tile(info.head_dim, info.v_dim, wide, kMaxSharedBytes);
  Tensor q_keep, k_keep, v_keep;
  AttentionOperand q = operand_of(query, info.batch, q_keep);
  AttentionOperand k = operand_of(key, info.batch, k_keep);
  AttentionOperand v = operand_of(value, info.batch, v_keep);
  Tensor m_keep;
  AttentionMask mask;
  if (info.has_mask) mask = mask_of(call.arg("attn_mask").to_tensor(), info, m_keep);
  const Tensor& dst = call.out(0);
  Tensor y = contiguous_destination(dst);
  SdpaShape shape = shape_of(info, query.dtype(), q, k, v);
  if (info.has_mask) set_bias_shape(shape, mask);
  std::vector<KernelCandidate> candidates;
  std::vector<RefusedKernel> refused;
  // Note [batch-invariant attention]: with SYMMFLOW_DETERMINISTIC=1 only the own kernel runs, and
  // unsplit: one block per query row walks its keys in tiles of a size set by the head dims and
  // the key length, so a row's bits do not depend on the batch. cuDNN's kernel choice and the
  // splits of the keys (Note [attention splits], by the number of rows) would.
  const bool deterministic = tunables().deterministic;
  if (deterministic) {
    refused.push_back({"cudnn", "SYMMFLOW_DETERMINISTIC=1: the own kernel's rows do not depend "
                                "on the batch (Note [batch-invariant attention])"});
  } else if (std::string why = cudnn_attention_refusal(shape, info.has_mask); !why.empty()) {
    refused.push_back({"cudnn", why});
  } else {
    candidates.push_back({"cudnn", [&] {
      if (!info.has_mask) return cudnn_attention(shape, y.raw_data(), nullptr);
      Tensor bias = make_bias(shape, mask, query);
      Tensor stats = Tensor::uninitialized({info.batch, info.heads, info.q_len}, DType::f32,
                                           query.device());
      cudnn_attention(shape, y.raw_data(), stats.raw_data(), bias.raw_data());
      fix_masked_rows(shape, stats, y.raw_data(), false);
    }});
  }
  if (tile <= 0) {
    refused.push_back({"own", fmt::format("head dims {} and {} need {} bytes of shared memory, at "
                                          "most {} fit",
                                          info.head_dim, info.v_dim,
                                          (2 * (info.head_dim + info.v_dim) + 1) * (wide ? 8 : 4),
                                          kMaxSharedBytes)});
  } else {
    candidates.push_back({"own", [&] {
      // Note [attention splits]: scratch for the splits' partial rows, a graph allocation inside
      // a capture (Note [scratch inside a capture]).
      const int64_t rows = info.batch * info.heads * info.q_len;
      const int64_t splits =
          deterministic ? 1 : attention_splits(rows, info.kv_len, tile, multiprocessors());
      Tensor partial;
      if (splits > 1) {
        partial = Tensor::uninitialized({rows * splits * (info.v_dim + 2)},
                                        wide ? DType::f64 : DType::f32, query.device());
      }
      SF_CUDA_CHECK(cudaError_t(launch_attention(
          q, k, v, mask, y.raw_data(), pw_type(query.dtype()), info.batch, info.heads,
          info.kv_heads, info.q_len, info.kv_len, info.head_dim, info.v_dim, info.causal,
          info.scale, tile, splits, splits > 1 ? partial.raw_data() : nullptr,
          current_stream())));
    }});
  }
  run_chosen(op, choice_key(info, query.dtype()), candidates, refused);
  finish_into(dst, y);
}

// Note [attention backward] (ops/aten/meta_attention.cpp). cuDNN's backward reads the forward's
// output and row statistics, which the op does not carry: its candidate runs cuDNN's forward
// with statistics into scratch first. The own kernel writes dq by row blocks and sums dk and dv
// in float (double for f64) scratch. Scratch is a graph allocation inside a capture (Note
// [scratch inside a capture]).
void sdpa_backward_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& grad_out = call.arg("grad_out").to_tensor();
  const Tensor& query = call.arg("query").to_tensor();
  const Tensor& key = call.arg("key").to_tensor();
  const Tensor& value = call.arg("value").to_tensor();
  aten_meta::SdpaInfo info = aten_meta::sdpa_backward_info(
      op, grad_out, query, key, value, call.arg("attn_mask"), call.arg("dropout_p"),
      call.arg("is_causal"), call.arg("scale"), call.arg("enable_gqa"));
  check_float(op, query.dtype());
  const bool wide = query.dtype() == DType::f64;
  const int64_t shared = 2 * attention_shared_bytes(info.kv_len, wide);
  Tensor o_keep, q_keep, k_keep, v_keep, m_keep;
  AttentionOperand dout = operand_of(grad_out, info.batch, o_keep);
  AttentionOperand q = operand_of(query, info.batch, q_keep);
  AttentionOperand k = operand_of(key, info.batch, k_keep);
  AttentionOperand v = operand_of(value, info.batch, v_keep);
  AttentionMask mask;
  if (info.has_mask) mask = mask_of(call.arg("attn_mask").to_tensor(), info, m_keep);
  Tensor dq = contiguous_destination(call.out(0));
  Tensor dk = contiguous_destination(call.out(1));
  Tensor dv = contiguous_destination(call.out(2));
  SdpaShape shape = shape_of(info, query.dtype(), q, k, v);
  if (info.has_mask) set_bias_shape(shape, mask);
  std::vector<KernelCandidate> candidates;
  std::vector<RefusedKernel> refused;
  if (std::string why = cudnn_attention_backward_refusal(shape, dout); !why.empty()) {
    refused.push_back({"cudnn", why});
  } else {
    candidates.push_back({"cudnn", [&] {
      Tensor o = Tensor::uninitialized({info.batch, info.heads, info.q_len, info.v_dim},
                                       query.dtype(), query.device());
      Tensor stats = Tensor::uninitialized({info.batch, info.heads, info.q_len}, DType::f32,
                                           query.device());
      Tensor bias = info.has_mask ? make_bias(shape, mask, query) : Tensor();
      const void* b = info.has_mask ? bias.raw_data() : nullptr;
      cudnn_attention(shape, o.raw_data(), stats.raw_data(), b);
      if (info.has_mask) fix_masked_rows(shape, stats, o.raw_data(), true);
      cudnn_attention_backward(shape, dout, o.raw_data(), stats.raw_data(), dq.raw_data(),
                               dk.raw_data(), dv.raw_data(), b);
    }});
  }
  if (shared > kMaxSharedBytes) {
    refused.push_back({"own", fmt::format("key length {} needs {} bytes of shared memory for its "
                                          "scores and their gradients, at most {}",
                                          info.kv_len, shared, kMaxSharedBytes)});
  } else {
    candidates.push_back({"own", [&] {
      const DType acc = wide ? DType::f64 : DType::f32;
      Tensor dk_acc = Tensor::uninitialized(key.shape(), acc, key.device());
      Tensor dv_acc = Tensor::uninitialized(value.shape(), acc, value.device());
      SF_CUDA_CHECK(cudaError_t(launch_attention_backward(
          dout, q, k, v, mask, dq.raw_data(), dk.raw_data(), dv.raw_data(), dk_acc.raw_data(),
          dv_acc.raw_data(), pw_type(query.dtype()), info.batch, info.heads, info.kv_heads,
          info.q_len, info.kv_len, info.head_dim, info.v_dim, info.causal, info.scale,
          current_stream())));
    }});
  }
  run_chosen(op, choice_key(info, query.dtype()), candidates, refused);
  finish_into(call.out(0), dq);
  finish_into(call.out(1), dk);
  finish_into(call.out(2), dv);
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cuda, m) {
  m.impl("embedding", embedding_kernel);
  m.impl("scaled_dot_product_attention", sdpa_kernel);
  m.kernel_check("embedding", float_only);  // its result has the weight's dtype
  m.impl("scaled_dot_product_attention_backward", sdpa_backward_kernel);
  m.kernel_check("scaled_dot_product_attention", float_only);
  m.kernel_check("scaled_dot_product_attention_backward", float_only);
}

}  // namespace symmflow::cuda
