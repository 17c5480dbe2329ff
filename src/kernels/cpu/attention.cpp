// CPU kernels of aten::embedding and aten::scaled_dot_product_attention.
//  - embedding: out[..., :] = weight[indices[...], :]; any weight dtype and layout, i64 or i32
//    indices of any layout; an index outside [0, num_embeddings) is an error naming it (PyTorch:
//    "index out of range in self"), checked before anything is written.
//  - scaled_dot_product_attention: for each (batch, head, query row) the scores
//    scale * q . k_j over the allowed keys (all, or j <= i with is_causal: PyTorch's top-left
//    aligned causal mask), a softmax (max subtracted) and the weighted sum of the value rows, all
//    in float (double for f64), rounded to the dtype once. Query head h reads key/value head
//    h / (heads / kv_heads) (grouped KV heads, enable_gqa). An empty key length gives zeros.
//    An attn_mask (Note [attention masks] in ops/aten/meta_attention.cpp) is read in place through
//    its broadcast strides: a bool one drops the scores where it is false, a floating one is
//    added to them; a row whose keys are all masked comes out as zeros, as PyTorch's does.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/common.hpp"
#include "kernels/cpu/strided.hpp"
#include "ops/aten/meta.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

void embedding_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& weight = call.arg("weight").to_tensor();
  const Tensor& indices = call.arg("indices").to_tensor();
  aten_meta::embedding_spec(op, weight, indices, call.arg("padding_idx"),
                            call.arg("scale_grad_by_freq"), call.arg("sparse"));
  Tensor idx = as_dtype(indices, DType::i64, /*contiguous=*/true);
  Tensor w = as_dtype(weight, weight.dtype(), /*contiguous=*/true);
  const int64_t rows = weight.shape()[0], dim = weight.shape()[1];
  const int64_t* ip = static_cast<const int64_t*>(idx.raw_data());
  for (int64_t n = 0; n < idx.numel(); ++n) {
    SF_CHECK(ip[n] >= 0 && ip[n] < rows,
             "{}: index {} (element {} of indices) is out of range for weight with {} rows", op,
             ip[n], n, rows);
  }
  Destination d(call.out(0), weight.dtype(), /*need_contiguous=*/true);
  const size_t row_bytes = size_t(dim) * dtype_size(weight.dtype());
  const auto* src = static_cast<const uint8_t*>(w.raw_data());
  auto* dst = static_cast<uint8_t*>(d.tensor().raw_data());
  for (int64_t n = 0; n < idx.numel(); ++n) {
    if (row_bytes == 0) continue;
    std::memcpy(dst + size_t(n) * row_bytes, src + size_t(ip[n]) * row_bytes, row_bytes);
  }
  d.finish();
}

// An attention mask in the accumulation type A, seen through its broadcast strides: the element
// for (b, h, i, j) is at base[b * heads + h] + i * row + j * col.
template <typename A>
struct MaskView {
  const A* data = nullptr;  // null: no mask
  bool is_bool = false;     // 1 keeps, 0 drops; else added
  std::vector<int64_t> base;
  int64_t row = 0, col = 0;
};

template <typename A>
MaskView<A> mask_view(const Tensor& mask_acc, const aten_meta::SdpaInfo& in) {
  MaskView<A> m;
  m.data = static_cast<const A*>(mask_acc.raw_data());
  m.is_bool = in.mask_is_bool;
  const Shape& full = in.scores_shape;
  Strides st = broadcast_strides(mask_acc.shape(), mask_acc.strides(), full);
  const size_t r = full.size();
  m.row = st[r - 2];
  m.col = st[r - 1];
  m.base.resize(size_t(in.batch * in.heads));
  for (int64_t b = 0; b < in.batch; ++b) {
    int64_t off = 0, rest = b;
    for (size_t d = r - 3; d-- > 0;) {  // b unravelled over the leading dims
      off += (rest % full[d]) * st[d];
      rest /= full[d];
    }
    for (int64_t h = 0; h < in.heads; ++h) m.base[size_t(b * in.heads + h)] = off + h * st[r - 3];
  }
  return m;
}

// q [B, H, L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev], o [B, H, L, Ev], contiguous, in A.
template <typename A>
void attention(const A* q, const A* k, const A* v, A* o, const aten_meta::SdpaInfo& in,
               const MaskView<A>& mask) {
  const int64_t group = in.heads / in.kv_heads;
  const int64_t L = in.q_len, S = in.kv_len, E = in.head_dim, Ev = in.v_dim;
  const A scale = A(in.scale);
  std::vector<A> p(static_cast<size_t>(S));
  for (int64_t b = 0; b < in.batch; ++b) {
    for (int64_t h = 0; h < in.heads; ++h) {
      const int64_t hk = h / group;
      const A* kh = k + (b * in.kv_heads + hk) * S * E;
      const A* vh = v + (b * in.kv_heads + hk) * S * Ev;
      for (int64_t i = 0; i < L; ++i) {
        const A* qi = q + ((b * in.heads + h) * L + i) * E;
        A* oi = o + ((b * in.heads + h) * L + i) * Ev;
        const int64_t keys = in.causal ? std::min(S, i + 1) : S;
        const A inf = std::numeric_limits<A>::infinity();
        const A* mrow = mask.data ? mask.data + mask.base[size_t(b * in.heads + h)] + i * mask.row
                                  : nullptr;
        A mx = -inf;
        for (int64_t j = 0; j < keys; ++j) {
          A dot = 0;
          for (int64_t e = 0; e < E; ++e) dot += qi[e] * kh[j * E + e];
          p[size_t(j)] = dot * scale;
          if (mrow) {
            const A mj = mrow[j * mask.col];
            p[size_t(j)] = mask.is_bool ? (mj != 0 ? p[size_t(j)] : -inf) : p[size_t(j)] + mj;
          }
          mx = std::max(mx, p[size_t(j)]);
        }
        for (int64_t e = 0; e < Ev; ++e) oi[e] = 0;
        if (mx == -inf) continue;  // every key masked: zeros, as PyTorch gives
        A sum = 0;
        for (int64_t j = 0; j < keys; ++j) {
          p[size_t(j)] = std::exp(p[size_t(j)] - mx);
          sum += p[size_t(j)];
        }
        for (int64_t j = 0; j < keys; ++j) {
          const A w = p[size_t(j)] / sum;
          for (int64_t e = 0; e < Ev; ++e) oi[e] += w * vh[j * Ev + e];
        }
      }
    }
  }
}

void sdpa_kernel(KernelCall& call) {
  const Tensor& query = call.arg("query").to_tensor();
  const Tensor& key = call.arg("key").to_tensor();
  const Tensor& value = call.arg("value").to_tensor();
  aten_meta::SdpaInfo info = aten_meta::sdpa_info(
      call.op.name(), query, key, value, call.arg("attn_mask"), call.arg("dropout_p"),
      call.arg("is_causal"), call.arg("scale"), call.arg("enable_gqa"));
  const DType acc = query.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor q = as_dtype(query, acc, /*contiguous=*/true);
  Tensor k = as_dtype(key, acc, /*contiguous=*/true);
  Tensor v = as_dtype(value, acc, /*contiguous=*/true);
  Tensor mask;  // in the accumulation type, its own (broadcast) shape
  if (info.has_mask) mask = as_dtype(call.arg("attn_mask").to_tensor(), acc);
  Destination d(call.out(0), acc, /*need_contiguous=*/true);
  if (acc == DType::f64) {
    attention<double>(static_cast<const double*>(q.raw_data()),
                      static_cast<const double*>(k.raw_data()),
                      static_cast<const double*>(v.raw_data()),
                      static_cast<double*>(d.tensor().raw_data()), info,
                      info.has_mask ? mask_view<double>(mask, info) : MaskView<double>{});
  } else {
    attention<float>(static_cast<const float*>(q.raw_data()),
                     static_cast<const float*>(k.raw_data()),
                     static_cast<const float*>(v.raw_data()),
                     static_cast<float*>(d.tensor().raw_data()), info,
                     info.has_mask ? mask_view<float>(mask, info) : MaskView<float>{});
  }
  d.finish();
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cpu, m) {
  m.impl("embedding", embedding_kernel);
  m.impl("scaled_dot_product_attention", sdpa_kernel);
}

}  // namespace symmflow::cpu
