// CPU kernels of aten::embedding and aten::scaled_dot_product_attention.
//  - embedding: out[..., :] = weight[indices[...], :]; any weight dtype and layout, i64 or i32
//    indices of any layout; an index outside [0, num_embeddings) is an error naming it (PyTorch:
//    "index out of range in self"), checked before anything is written.
//  - scaled_dot_product_attention (Note [cpu attention blocks]: OpenBLAS GEMMs over blocks of
//    query rows, gemv for a few rows: Note [decode attention by gemv]): for each (batch, head,
//    query row) the scores scale * q . k_j over the allowed keys (all, or j <= i with
//    is_causal: PyTorch's top-left aligned causal mask), a softmax (max subtracted) and the
//    weighted sum of the value rows, all in float (double for f64), rounded to the dtype once.
//    Query head h reads key/value head h / (heads / kv_heads) (grouped KV heads, enable_gqa).
//    An empty key length gives zeros.
//    An attn_mask (Note [attention masks] in ops/aten/meta_attention.cpp) is read in place through
//    its broadcast strides: a bool one drops the scores where it is false, a floating one is
//    added to them; a row whose keys are all masked comes out as zeros, as PyTorch's does.
//  - scaled_dot_product_attention_backward (Note [attention backward] in
//    ops/aten/meta_attention.cpp): each query row's probabilities recomputed as above, then its
//    dq row, and its terms of dk and dv accumulated over the rows (and the query heads of a key/value
//    head) in float (double for f64), rounded to the dtype once; a fully masked row adds nothing.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/blas.hpp"
#include "kernels/cpu/common.hpp"
#include "kernels/cpu/strided.hpp"
#include "kernels/cpu/vector_math.hpp"
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

// Note [cpu attention blocks]: attention runs per (batch, head) over blocks of kBlockRows query
// rows with OpenBLAS's GEMMs: the block's scores scale * Q K^T over the keys its last row may see
// (one GEMM), each row masked (causal j <= i, the mask), softmax-normalised in place (max
// subtracted), then P V (one GEMM). The backward recomputes P the same way and takes dP = dO V^T,
// dS = P * (dP - rowsum(P * dP)) * scale, dQ = dS K, dK += dS^T Q and dV += P^T dO as GEMMs. All
// in float (double for f64); a row whose keys are all masked has P = 0 (zeros out, no gradient).
constexpr int64_t kBlockRows = 128;

inline void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                      float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}
inline void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                      const double* a, int64_t lda, const double* b, int64_t ldb, double beta,
                      double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

// Note [decode attention by gemv]: a decode step's attention has one query row per sequence
// (a few with speculative tokens), and OpenBLAS's gemm packs its B operand, the whole K or V
// block of the cache, on every call (Note [few rows by gemv] in matmul.cpp): a one-token step of
// a 2-layer Llama over a 4096-key cache spent 43% of its time in sgemm's packing and kernels
// (perf, this project's 2-CPU machine). So C = A op(B) with at most kGemvRows rows of A, A not
// transposed, runs as one gemv per row (kGemvRows in blas.hpp), which reads the cache once, in
// place.

template <typename A>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, A alpha, const A* a, int64_t lda,
          const A* b, int64_t ldb, A beta, A* c, int64_t ldc) {
  if (ta || m > kGemvRows) {
    blas_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  for (int64_t r = 0; r < m; ++r) {  // row r of C: B (n x k) times a_r, or B^T (B: k x n)
    if (tb)
      blas_gemv<A>(CblasNoTrans, n, k, alpha, b, ldb, a + r * lda, 1, beta, c + r * ldc, 1);
    else
      blas_gemv<A>(CblasTrans, k, n, alpha, b, ldb, a + r * lda, 1, beta, c + r * ldc, 1);
  }
}

// The probabilities of query rows [i0, i0 + rows) of (b, h) over their first `keys` keys into p
// ([rows, keys]): scores by one GEMM, then per row the causal limit, the mask and the softmax; a
// row whose keys are all masked becomes zeros.
template <typename A>
void block_probabilities(const A* qb, const A* kh, int64_t i0, int64_t rows, int64_t keys,
                         int64_t E, A scale, bool causal, const A* mbase,
                         const MaskView<A>& mask, A* p) {
  const A inf = std::numeric_limits<A>::infinity();
  gemm(false, true, rows, keys, E, scale, qb, E, kh, E, A(0), p, keys);
  for (int64_t r = 0; r < rows; ++r) {
    A* pr = p + r * keys;
    const int64_t i = i0 + r;
    const int64_t allowed = causal ? std::min(keys, i + 1) : keys;
    const A* mrow = mbase ? mbase + i * mask.row : nullptr;
    if (mrow) {
      for (int64_t j = 0; j < allowed; ++j) {
        const A mj = mrow[j * mask.col];
        pr[j] = mask.is_bool ? (mj != 0 ? pr[j] : -inf) : pr[j] + mj;
      }
    }
    // Loops that vectorize: Note [lane reductions], Note [vector exp].
    const A mx = lane_max(pr, allowed, -inf);
    if (mx == -inf) {
      std::fill(pr, pr + keys, A(0));
      continue;
    }
    for (int64_t j = 0; j < allowed; ++j) pr[j] = vexp(pr[j] - mx);
    const A inv = A(1) / lane_sum(pr, allowed);
    for (int64_t j = 0; j < allowed; ++j) pr[j] *= inv;
    std::fill(pr + allowed, pr + keys, A(0));
  }
}

// The keys the rows [i0, i0 + rows) may see: all, or with causal up to the last row's.
inline int64_t block_keys(bool causal, int64_t S, int64_t i0, int64_t rows) {
  return causal ? std::min(S, i0 + rows) : S;
}

// q [B, H, L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev], o [B, H, L, Ev], contiguous, in A
// (Note [cpu attention blocks]).
template <typename A>
void attention(const A* q, const A* k, const A* v, A* o, const aten_meta::SdpaInfo& in,
               const MaskView<A>& mask) {
  const int64_t group = in.heads / in.kv_heads;
  const int64_t L = in.q_len, S = in.kv_len, E = in.head_dim, Ev = in.v_dim;
  std::vector<A> p(static_cast<size_t>(std::min(L, kBlockRows) * std::max<int64_t>(S, 1)));
  for (int64_t b = 0; b < in.batch; ++b) {
    for (int64_t h = 0; h < in.heads; ++h) {
      const int64_t kv = b * in.kv_heads + h / group;
      const A* mbase = mask.data ? mask.data + mask.base[size_t(b * in.heads + h)] : nullptr;
      for (int64_t i0 = 0; i0 < L; i0 += kBlockRows) {
        const int64_t rows = std::min(kBlockRows, L - i0);
        const int64_t keys = block_keys(in.causal, S, i0, rows);
        A* ob = o + ((b * in.heads + h) * L + i0) * Ev;
        if (keys == 0 || Ev == 0) {
          std::fill(ob, ob + rows * Ev, A(0));
          continue;
        }
        block_probabilities(q + ((b * in.heads + h) * L + i0) * E, k + kv * S * E, i0, rows,
                            keys, E, A(in.scale), in.causal, mbase, mask, p.data());
        gemm(false, false, rows, Ev, keys, A(1), p.data(), keys, v + kv * S * Ev, Ev, A(0), ob,
             Ev);
      }
    }
  }
}

// q, dq [B, H, L, E], k, dk [B, Hkv, S, E], v, dv [B, Hkv, S, Ev], dout [B, H, L, Ev],
// contiguous, in A; dk and dv zeroed by the caller (Note [cpu attention blocks]).
template <typename A>
void attention_backward(const A* dout, const A* q, const A* k, const A* v, A* dq, A* dk, A* dv,
                        const aten_meta::SdpaInfo& in, const MaskView<A>& mask) {
  const int64_t group = in.heads / in.kv_heads;
  const int64_t L = in.q_len, S = in.kv_len, E = in.head_dim, Ev = in.v_dim;
  const A scale = A(in.scale);
  const size_t block = static_cast<size_t>(std::min(L, kBlockRows) * std::max<int64_t>(S, 1));
  std::vector<A> p(block), dp(block);
  for (int64_t b = 0; b < in.batch; ++b) {
    for (int64_t h = 0; h < in.heads; ++h) {
      const int64_t kv = b * in.kv_heads + h / group;
      const A* kh = k + kv * S * E;
      const A* vh = v + kv * S * Ev;
      const A* mbase = mask.data ? mask.data + mask.base[size_t(b * in.heads + h)] : nullptr;
      for (int64_t i0 = 0; i0 < L; i0 += kBlockRows) {
        const int64_t rows = std::min(kBlockRows, L - i0);
        const int64_t keys = block_keys(in.causal, S, i0, rows);
        const int64_t row0 = (b * in.heads + h) * L + i0;
        A* dqb = dq + row0 * E;
        std::fill(dqb, dqb + rows * E, A(0));
        if (keys == 0) continue;
        const A* qb = q + row0 * E;
        const A* dob = dout + row0 * Ev;
        block_probabilities(qb, kh, i0, rows, keys, E, scale, in.causal, mbase, mask, p.data());
        if (Ev > 0) {
          gemm(false, true, rows, keys, Ev, A(1), dob, Ev, vh, Ev, A(0), dp.data(), keys);
        } else {
          std::fill(dp.begin(), dp.begin() + rows * keys, A(0));
        }
        for (int64_t r = 0; r < rows; ++r) {  // dP becomes dS
          const A* pr = p.data() + r * keys;
          A* dpr = dp.data() + r * keys;
          A d = 0;  // D_i = sum_j P_ij dP_ij
          for (int64_t j = 0; j < keys; ++j) d += pr[j] * dpr[j];
          for (int64_t j = 0; j < keys; ++j) dpr[j] = pr[j] * (dpr[j] - d) * scale;
        }
        if (E > 0) {
          gemm(false, false, rows, E, keys, A(1), dp.data(), keys, kh, E, A(0), dqb, E);
          gemm(true, false, keys, E, rows, A(1), dp.data(), keys, qb, E, A(1), dk + kv * S * E, E);
        }
        if (Ev > 0)
          gemm(true, false, keys, Ev, rows, A(1), p.data(), keys, dob, Ev, A(1), dv + kv * S * Ev,
               Ev);
      }
    }
  }
}

template <typename A>
void sdpa_backward_typed(KernelCall& call, const aten_meta::SdpaInfo& info, DType acc) {
  Tensor dout = as_dtype(call.arg("grad_out").to_tensor(), acc, /*contiguous=*/true);
  Tensor q = as_dtype(call.arg("query").to_tensor(), acc, /*contiguous=*/true);
  Tensor k = as_dtype(call.arg("key").to_tensor(), acc, /*contiguous=*/true);
  Tensor v = as_dtype(call.arg("value").to_tensor(), acc, /*contiguous=*/true);
  Tensor mask;
  if (info.has_mask) mask = as_dtype(call.arg("attn_mask").to_tensor(), acc);
  Destination dq(call.out(0), acc, /*need_contiguous=*/true);
  Destination dk(call.out(1), acc, /*need_contiguous=*/true);
  Destination dv(call.out(2), acc, /*need_contiguous=*/true);
  for (Destination* d : {&dk, &dv}) {
    std::memset(d->tensor().raw_data(), 0, size_t(d->tensor().numel()) * sizeof(A));
  }
  auto data = [](const Tensor& t) { return static_cast<const A*>(t.raw_data()); };
  auto out = [](Destination& d) { return static_cast<A*>(d.tensor().raw_data()); };
  attention_backward<A>(data(dout), data(q), data(k), data(v), out(dq), out(dk), out(dv), info,
                        info.has_mask ? mask_view<A>(mask, info) : MaskView<A>{});
  dq.finish();
  dk.finish();
  dv.finish();
}

void sdpa_backward_kernel(KernelCall& call) {
  const Tensor& query = call.arg("query").to_tensor();
  aten_meta::SdpaInfo info = aten_meta::sdpa_backward_info(
      call.op.name(), call.arg("grad_out").to_tensor(), query, call.arg("key").to_tensor(),
      call.arg("value").to_tensor(), call.arg("attn_mask"), call.arg("dropout_p"),
      call.arg("is_causal"), call.arg("scale"), call.arg("enable_gqa"));
  if (query.dtype() == DType::f64) {
    sdpa_backward_typed<double>(call, info, DType::f64);
  } else {
    sdpa_backward_typed<float>(call, info, DType::f32);
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
  m.impl("scaled_dot_product_attention_backward", sdpa_backward_kernel);
}

}  // namespace symmflow::cpu
