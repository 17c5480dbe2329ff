// aten::scaled_dot_product_attention and aten::embedding on the cpu: every element against a
// naive f64 reference (scores, max-subtracted softmax, weighted values; causal keys j <= i), over
// awkward sizes (odd head dims, a value dim unlike the key dim, L = 1 and L = 17, L < S and L > S,
// 1-sized dims, two batch dims), grouped KV heads 4:1 and 2:1, non-contiguous inputs, an explicit
// scale, every float dtype (bf16/f16 to their tolerance); torch eager's own outputs for two cases
// (tests/python/ref/sdpa_ref.py printed them); and the error text of every refused argument.
#include <array>
#include <functional>

#include "test_util.hpp"

namespace symmflow::test {
namespace {

// torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), f64.
const double kTorchShort[] = {
    0.90929742682568171, 0.69727773825993777, 0.39088477889845219, 0.031587398436453896,
    -0.33198518822073408, 0.47327044139388225, 0.25606255672442402, 0.0041978062460713327,
    -0.24823509761488741, -0.46707054553715727, -0.53966020468432763, -0.45454788204969165,
    -0.30791463596014051, -0.11960658838624023, 0.084889649825866678, 0.90929742682568171,
    0.69727773825993777, 0.39088477889845219, 0.031587398436453896, -0.33198518822073408,
    0.75694187828305015, 0.54310934214195405, 0.25576950438304497, -0.066187535925123067,
    -0.37918640374559337, -0.45015880136958913, -0.47493939370395788, -0.43543916714191194,
    -0.33700429204468391, -0.1929574669778101, 0.90929742682568171, 0.69727773825993777,
    0.39088477889845219, 0.031587398436453896, -0.33198518822073408, 0.77438748358088416,
    0.56076252913646563, 0.27124099702937088, -0.054991731576609977, -0.3737815872915719,
    0.024725164263833567, -0.10275791389420526, -0.21633319046582949, -0.30062878457277725,
    -0.34423568300118235, 0.90929742682568171, 0.69727773825993777, 0.39088477889845219,
    0.031587398436453896, -0.33198518822073408, 0.56988494650765764, 0.35382665811490044,
    0.089879591422180147, -0.18623225632530779, -0.43713844183417422, 0.59012498965210314,
    0.40783449672966099, 0.17034551791297212, -0.090198927626287548, -0.33853537145362739
};
const double kTorchLong[] = {
    0.90929742682568171, 0.69727773825993777, 0.39088477889845219, 0.59609048505704898,
    0.32998981508277925, 0.019226571689258409, 0.28281362252937936, 0.029282480501118098,
    -0.22821190789264359, -0.57748126138869471, -0.55727775402738178, -0.4616493169665879,
    -0.73926463772424478, -0.62027053491030215, -0.41732572501686932, -0.4530126679819782,
    -0.45740477372713806, -0.39988928913112465, 0.90929742682568171, 0.69727773825993777,
    0.39088477889845219, 0.58046788591902765, 0.31166968475734164, 0.00068845387233596497,
    0.083864625299754261, -0.15568147947087121, -0.37415682632994968, -0.69022922061586378,
    -0.6103785025403875, -0.44791591756106741, -0.71239561291829478, -0.6060591889566086,
    -0.41769549692182711, -0.15100307153810477, -0.25328067047597386, -0.32127791885825796
};

struct Sdpa {
  Shape lead;  // batch dims
  int64_t heads, kv_heads, q_len, kv_len, head_dim, v_dim;
  bool causal;
};

Shape shape_of(const Shape& lead, int64_t h, int64_t l, int64_t e) {
  Shape s = lead;
  s.insert(s.end(), {h, l, e});
  return s;
}

// `add(b, h, i, j)`: what a mask adds to the score (0, -inf for a dropped key, or a float).
using MaskFn = std::function<double(int64_t, int64_t, int64_t, int64_t)>;

std::vector<double> ref_sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Sdpa& c,
                             double scale, const MaskFn& add = nullptr) {
  std::vector<double> qv = q.to_doubles(), kv = k.to_doubles(), vv = v.to_doubles();
  const int64_t batch = numel(c.lead), group = c.heads / c.kv_heads;
  std::vector<double> out(size_t(batch * c.heads * c.q_len * c.v_dim), 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < c.q_len; ++i) {
        std::vector<double> s;
        for (int64_t j = 0; j < c.kv_len && (!c.causal || j <= i); ++j) {
          double dot = 0;
          for (int64_t e = 0; e < c.head_dim; ++e) {
            dot += qv[size_t(((b * c.heads + h) * c.q_len + i) * c.head_dim + e)] *
                   kv[size_t(((b * c.kv_heads + hk) * c.kv_len + j) * c.head_dim + e)];
          }
          s.push_back(dot * scale + (add ? add(b, h, i, j) : 0.0));
        }
        double mx = -INFINITY, sum = 0;
        for (double x : s) mx = std::max(mx, x);
        if (mx == -INFINITY) continue;  // every key masked: zeros
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (size_t j = 0; j < s.size(); ++j) {
          for (int64_t e = 0; e < c.v_dim; ++e) {
            out[size_t(((b * c.heads + h) * c.q_len + i) * c.v_dim + e)] +=
                s[j] / sum *
                vv[size_t(((b * c.kv_heads + hk) * c.kv_len + int64_t(j)) * c.v_dim + e)];
          }
        }
      }
    }
  }
  return out;
}

// A random [lead..., h, l, e] tensor, laid out as [lead..., l, h, e] when `permuted`.
Tensor attention_input(const Shape& lead, int64_t h, int64_t l, int64_t e, DType dt, uint32_t seed,
                       bool permuted) {
  if (!permuted) return random_tensor(shape_of(lead, h, l, e), dt, seed);
  Tensor base = random_tensor(shape_of(lead, l, h, e), dt, seed);
  std::vector<int64_t> order;
  for (size_t d = 0; d < lead.size(); ++d) order.push_back(int64_t(d));
  int64_t r = int64_t(lead.size());
  order.insert(order.end(), {r + 1, r, r + 2});
  return call_t("aten::permute", {base, order});
}

const Sdpa kCases[] = {
    {{2}, 8, 2, 17, 17, 7, 7, true},    // GQA 4:1, odd sizes, self-attention
    {{1}, 4, 2, 1, 9, 5, 3, true},      // 2:1, one query row (decode), Ev != E
    {{2, 1}, 2, 2, 3, 5, 4, 4, true},   // L < S: top-left causal; two batch dims
    {{1}, 2, 1, 6, 3, 3, 5, true},      // L > S
    {{3}, 3, 3, 17, 4, 1, 2, false},    // no mask, head dim 1
    {{1}, 1, 1, 1, 1, 1, 1, true},      // everything 1
    // Note [cpu attention blocks]: more query rows than one block of 128
    {{1}, 4, 2, 300, 300, 16, 16, true},  // causal over three blocks
    {{1}, 2, 1, 200, 150, 8, 8, true},    // L > S over two blocks
    {{2}, 2, 2, 130, 257, 8, 4, false},   // a block of two rows last
};

TEST(AtenAttention, EveryElementAgainstANaiveReference) {
  uint32_t seed = 1;
  for (DType dt : kFloatTypes) {
    for (const Sdpa& c : kCases) {
      for (bool permuted : {false, true}) {
        const bool gqa = c.heads != c.kv_heads;
        Tensor q = attention_input(c.lead, c.heads, c.q_len, c.head_dim, dt, seed++, permuted);
        Tensor k = attention_input(c.lead, c.kv_heads, c.kv_len, c.head_dim, dt, seed++, permuted);
        Tensor v = attention_input(c.lead, c.kv_heads, c.kv_len, c.v_dim, dt, seed++, permuted);
        Tensor got = call_t("aten::scaled_dot_product_attention", {q, k, v},
                            {{"is_causal", c.causal}, {"enable_gqa", gqa}});
        ASSERT_EQ(got.shape(), shape_of(c.lead, c.heads, c.q_len, c.v_dim));
        std::vector<double> want = ref_sdpa(q, k, v, c, 1 / std::sqrt(double(c.head_dim)));
        expect_close(got, want, dt,
                     fmt::format("sdpa {} H={} Hkv={} L={} S={} permuted={}", dtype_name(dt),
                                 c.heads, c.kv_heads, c.q_len, c.kv_len, permuted));
        // An explicit scale.
        Tensor scaled =
            call_t("aten::scaled_dot_product_attention", {q, k, v, Value(), 0.0, c.causal},
                   {{"scale", 0.3}, {"enable_gqa", gqa}});
        expect_close(scaled, ref_sdpa(q, k, v, c, 0.3), dt, "sdpa scale=0.3");
      }
    }
  }
}

Tensor pattern(const Shape& shape, double offset) {
  Tensor t = Tensor::empty(shape, DType::f64);
  for (int64_t n = 0; n < t.numel(); ++n) {
    store_double(t.view(), n, std::sin(0.37 * double(n) + offset));
  }
  return t;
}

TEST(AtenAttention, MatchesTorchEager) {
  for (auto [q_shape, kv_shape, want, count] :
       {std::tuple{Shape{1, 4, 3, 5}, Shape{1, 1, 6, 5}, kTorchShort, std::size(kTorchShort)},
        std::tuple{Shape{1, 2, 6, 3}, Shape{1, 1, 4, 3}, kTorchLong, std::size(kTorchLong)}}) {
    Tensor got = call_t("aten::scaled_dot_product_attention",
                        {pattern(q_shape, 0), pattern(kv_shape, 1), pattern(kv_shape, 2)},
                        {{"is_causal", true}, {"enable_gqa", true}});
    expect_close(got, std::vector<double>(want, want + count), DType::f64, "torch golden");
  }
}

// Note [attention masks]: a bool mask broadcast from [L, S] and from [B, 1, L, S] (with a row
// whose keys are all dropped: zeros), and an additive [B, H, L, S] mask of the query's dtype,
// over grouped heads and permuted inputs, every element against the reference.
TEST(AtenAttention, MasksEveryElementAgainstANaiveReference) {
  const Sdpa c{{2}, 4, 2, 5, 7, 6, 3, false};
  uint32_t seed = 100;
  for (DType dt : kFloatTypes) {
    for (bool permuted : {false, true}) {
      Tensor q = attention_input(c.lead, c.heads, c.q_len, c.head_dim, dt, seed++, permuted);
      Tensor k = attention_input(c.lead, c.kv_heads, c.kv_len, c.head_dim, dt, seed++, permuted);
      Tensor v = attention_input(c.lead, c.kv_heads, c.kv_len, c.v_dim, dt, seed++, permuted);
      auto keep2 = [](int64_t i, int64_t j) { return (i + 2 * j) % 3 != 0; };
      Tensor m2 = Tensor::empty({c.q_len, c.kv_len}, DType::boolean);
      for (int64_t i = 0; i < c.q_len; ++i)
        for (int64_t j = 0; j < c.kv_len; ++j) store_double(m2.view(), i * c.kv_len + j, keep2(i, j));
      auto keep4 = [](int64_t b, int64_t i, int64_t j) { return i != 1 && (b + i + j) % 4 != 0; };
      Tensor m4 = Tensor::empty({2, 1, c.q_len, c.kv_len}, DType::boolean);
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t i = 0; i < c.q_len; ++i)
          for (int64_t j = 0; j < c.kv_len; ++j)
            store_double(m4.view(), (b * c.q_len + i) * c.kv_len + j, keep4(b, i, j));
      Tensor add = random_tensor({2, c.heads, c.q_len, c.kv_len}, dt, seed++);
      std::vector<double> addv = add.to_doubles();
      const double scale = 1 / std::sqrt(double(c.head_dim));
      struct Case {
        Tensor mask;
        MaskFn fn;
        const char* what;
      };
      const double inf = INFINITY;
      Case cases[] = {
          {m2, [&](int64_t, int64_t, int64_t i, int64_t j) { return keep2(i, j) ? 0.0 : -inf; },
           "bool [L, S]"},
          {m4,
           [&](int64_t b, int64_t, int64_t i, int64_t j) { return keep4(b, i, j) ? 0.0 : -inf; },
           "bool [B, 1, L, S], row 1 all dropped"},
          {add,
           [&](int64_t b, int64_t h, int64_t i, int64_t j) {
             return addv[size_t(((b * c.heads + h) * c.q_len + i) * c.kv_len + j)];
           },
           "additive [B, H, L, S]"},
      };
      for (const Case& m : cases) {
        Tensor got = call_t("aten::scaled_dot_product_attention", {q, k, v, m.mask},
                            {{"enable_gqa", true}});
        expect_close(got, ref_sdpa(q, k, v, c, scale, m.fn), dt,
                     fmt::format("sdpa {} {} permuted={}", dtype_name(dt), m.what, permuted));
      }
      std::vector<double> zeros = call_t("aten::scaled_dot_product_attention", {q, k, v, m4},
                                         {{"enable_gqa", true}})
                                      .to_doubles();
      for (int64_t e = 0; e < c.v_dim; ++e) EXPECT_EQ(zeros[size_t(1 * c.v_dim + e)], 0.0);
    }
  }
}

// dq, dk, dv of the attention of ref_sdpa against grad `g` (f64, the row algorithm of Note
// [attention backward]: P, D_i = sum_j P_ij dO_i . v_j, dS = P (dO . v - D) scale), masked by `add`.
std::array<std::vector<double>, 3> ref_sdpa_backward(const Tensor& g, const Tensor& q,
                                                     const Tensor& k, const Tensor& v,
                                                     const Sdpa& c, double scale,
                                                     const MaskFn& add = nullptr) {
  std::vector<double> gv = g.to_doubles(), qv = q.to_doubles(), kv = k.to_doubles(),
                      vv = v.to_doubles();
  const int64_t batch = numel(c.lead), group = c.heads / c.kv_heads;
  const int64_t E = c.head_dim, Ev = c.v_dim, S = c.kv_len;
  std::array<std::vector<double>, 3> out = {std::vector<double>(qv.size(), 0.0),
                                            std::vector<double>(kv.size(), 0.0),
                                            std::vector<double>(vv.size(), 0.0)};
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t kvh = b * c.kv_heads + h / group;
      for (int64_t i = 0; i < c.q_len; ++i) {
        const int64_t row = (b * c.heads + h) * c.q_len + i;
        std::vector<double> p;
        for (int64_t j = 0; j < S && (!c.causal || j <= i); ++j) {
          double dot = 0;
          for (int64_t e = 0; e < E; ++e) dot += qv[size_t(row * E + e)] * kv[size_t((kvh * S + j) * E + e)];
          p.push_back(dot * scale + (add ? add(b, h, i, j) : 0.0));
        }
        double mx = -INFINITY, sum = 0;
        for (double x : p) mx = std::max(mx, x);
        if (mx == -INFINITY) continue;
        for (double& x : p) sum += (x = std::exp(x - mx));
        for (double& x : p) x /= sum;
        std::vector<double> dp(p.size());
        double d = 0;
        for (size_t j = 0; j < p.size(); ++j) {
          for (int64_t e = 0; e < Ev; ++e)
            dp[j] += gv[size_t(row * Ev + e)] * vv[size_t((kvh * S + int64_t(j)) * Ev + e)];
          d += p[j] * dp[j];
        }
        for (size_t j = 0; j < p.size(); ++j) {
          const double ds = p[j] * (dp[j] - d) * scale;
          const int64_t kj = kvh * S + int64_t(j);
          for (int64_t e = 0; e < E; ++e) {
            out[0][size_t(row * E + e)] += ds * kv[size_t(kj * E + e)];
            out[1][size_t(kj * E + e)] += ds * qv[size_t(row * E + e)];
          }
          for (int64_t e = 0; e < Ev; ++e) out[2][size_t(kj * Ev + e)] += p[j] * gv[size_t(row * Ev + e)];
        }
      }
    }
  }
  return out;
}

// Note [cpu attention blocks]: the backward's GEMM blocks, every element of dq, dk and dv against
// the row-by-row reference, over the cases above (grouped heads, L != S, several blocks) and a
// bool mask with a fully masked row (no gradient from it), f32 and f64.
TEST(AtenAttention, BackwardEveryElementAgainstANaiveReference) {
  uint32_t seed = 500;
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Sdpa& c : kCases) {
      for (bool masked : {false, true}) {
        if (masked && c.causal) continue;  // a mask and is_causal cannot be given together
        const bool gqa = c.heads != c.kv_heads;
        Tensor q = attention_input(c.lead, c.heads, c.q_len, c.head_dim, dt, seed++, true);
        Tensor k = attention_input(c.lead, c.kv_heads, c.kv_len, c.head_dim, dt, seed++, false);
        Tensor v = attention_input(c.lead, c.kv_heads, c.kv_len, c.v_dim, dt, seed++, false);
        Tensor g = attention_input(c.lead, c.heads, c.q_len, c.v_dim, dt, seed++, false);
        auto keep = [](int64_t i, int64_t j) { return i != 2 && (i + 3 * j) % 5 != 0; };
        Tensor m = Tensor::empty({c.q_len, c.kv_len}, DType::boolean);
        for (int64_t n = 0; n < c.q_len * c.kv_len; ++n)
          store_double(m.view(), n, keep(n / c.kv_len, n % c.kv_len));
        MaskFn fn = nullptr;
        if (masked) fn = [&](int64_t, int64_t, int64_t i, int64_t j) { return keep(i, j) ? 0.0 : -INFINITY; };
        std::vector<Value> args = {g, q, k, v};
        if (masked) args.push_back(m);
        std::vector<Tensor> got = call("aten::scaled_dot_product_attention_backward", args,
                                       {{"is_causal", c.causal}, {"enable_gqa", gqa}})
                                      .to_tensor_list();
        auto want = ref_sdpa_backward(g, q, k, v, c, 1 / std::sqrt(double(c.head_dim)), fn);
        for (size_t i = 0; i < 3; ++i)
          expect_close(got[i], want[i], dt,
                       fmt::format("sdpa backward {} grad {} H={} L={} S={} masked={}",
                                   dtype_name(dt), i, c.heads, c.q_len, c.kv_len, masked));
      }
    }
  }
}

TEST(AtenAttention, EmptyKeysGiveZeros) {
  Tensor q = random_tensor({1, 2, 3, 4}, DType::f32, 1);
  Tensor k = Tensor::empty({1, 2, 0, 4}, DType::f32), v = Tensor::empty({1, 2, 0, 5}, DType::f32);
  Tensor got = call_t("aten::scaled_dot_product_attention", {q, k, v});
  EXPECT_EQ(got.shape(), (Shape{1, 2, 3, 5}));
  EXPECT_EQ(got.to_doubles(), std::vector<double>(30, 0.0));
}

TEST(AtenAttention, Errors) {
  const char* op = "aten::scaled_dot_product_attention";
  Tensor q = random_tensor({1, 4, 3, 8}, DType::f32, 1);
  Tensor k = random_tensor({1, 2, 5, 8}, DType::f32, 2);
  Tensor v = random_tensor({1, 2, 5, 8}, DType::f32, 3);
  Tensor mask = random_tensor({3, 5}, DType::f32, 4);
  expect_error([&] { call(op, {q, k, v, mask, 0.0, true}, {{"enable_gqa", true}}); },
               "aten::scaled_dot_product_attention: attn_mask and is_causal=True cannot be given "
               "together");
  Tensor wide = random_tensor({3, 6}, DType::f32, 4);
  expect_error([&] { call(op, {q, k, v, wide}, {{"enable_gqa", true}}); },
               "aten::scaled_dot_product_attention: attn_mask has shape [3, 6], which does not "
               "broadcast to the scores' shape [1, 4, 3, 5]");
  Tensor ints = Tensor::zeros({3, 5}, DType::i32);
  expect_error([&] { call(op, {q, k, v, ints}, {{"enable_gqa", true}}); },
               "attn_mask");
  expect_error([&] { call(op, {q, k, v, Value(), 0.1}, {{"enable_gqa", true}}); },
               "aten::scaled_dot_product_attention: dropout_p must be 0.0 (inference only), got "
               "0.1");
  expect_error([&] { call(op, {q, k, v}); },
               "aten::scaled_dot_product_attention: query has 4 heads and key/value have 2; "
               "expected the same number of heads (pass enable_gqa=True for grouped key/value "
               "heads)");
  Tensor k3 = random_tensor({1, 3, 5, 8}, DType::f32, 2);
  Tensor v3 = random_tensor({1, 3, 5, 8}, DType::f32, 3);
  expect_error([&] { call(op, {q, k3, v3}, {{"enable_gqa", true}}); },
               "aten::scaled_dot_product_attention: query has 4 heads and key/value have 3; with "
               "enable_gqa the query heads must be a multiple of the key/value heads");
  Tensor kb = random_tensor({1, 2, 5, 8}, DType::bf16, 2);
  expect_error([&] { call(op, {q, kb, v}, {{"enable_gqa", true}}); },
               "aten::scaled_dot_product_attention: key has dtype bf16 and query has dtype f32; "
               "expected the same dtype");
  Tensor k7 = random_tensor({1, 2, 5, 7}, DType::f32, 2);
  expect_error([&] { call(op, {q, k7, v}, {{"enable_gqa", true}}); },
               "aten::scaled_dot_product_attention: key has head dim 7 but query has 8");
  Tensor v4 = random_tensor({1, 2, 4, 8}, DType::f32, 2);
  expect_error([&] { call(op, {q, k, v4}, {{"enable_gqa", true}}); },
               "aten::scaled_dot_product_attention: value has shape [1, 2, 4, 8] but key has shape "
               "[1, 2, 5, 8]; expected the same heads and length");
  Tensor q2 = random_tensor({4, 8}, DType::f32, 1);
  expect_error([&] { call(op, {q2, k, v}); },
               "aten::scaled_dot_product_attention: query must have at least 3 dims [..., heads, "
               "len, dim], got shape [4, 8]");
  Tensor kbatch = random_tensor({2, 2, 5, 8}, DType::f32, 2);
  expect_error([&] { call(op, {q, kbatch, v}, {{"enable_gqa", true}}); },
               "the leading (batch) dims must be equal");
  Tensor qi = Tensor::empty({1, 4, 3, 8}, DType::i64);
  expect_error([&] { call(op, {qi, qi, qi}); },
               "aten::scaled_dot_product_attention: query has dtype i64, which is not supported");
}

// ---- embedding --------------------------------------------------------------------------------

TEST(AtenEmbedding, GathersRowsForEveryDtypeAndIndexType) {
  for (DType dt : kAllDTypes) {
    for (DType it : {DType::i64, DType::i32}) {
      for (Layout layout : {Layout::contiguous, Layout::transposed}) {
        Tensor w = random_tensor({7, 5}, dt, 41, layout);
        Tensor idx = Tensor::empty({2, 3}, it);
        const int64_t rows[] = {6, 0, 3, 3, 1, 6};
        for (int64_t n = 0; n < 6; ++n) store_double(idx.view(), n, double(rows[n]));
        Tensor got = call_t("aten::embedding", {w, idx});
        ASSERT_EQ(got.shape(), (Shape{2, 3, 5}));
        ASSERT_EQ(got.dtype(), dt);
        for (int64_t n = 0; n < got.numel(); ++n) {
          ASSERT_EQ(got.item_as_double(unravel(n, got.shape())),
                    w.item_as_double(std::vector<int64_t>{rows[n / 5], n % 5}));
        }
      }
    }
  }
  // Scalar indices give one row; padding_idx and the gradient flags change nothing here.
  Tensor w = random_tensor({4, 3}, DType::bf16, 43);
  Tensor one = Tensor::empty({}, DType::i64);
  store_double(one.view(), 0, 2);
  Tensor row = call_t("aten::embedding", {w, one, int64_t(2), true, true});
  ASSERT_EQ(row.shape(), (Shape{3}));
  for (int64_t c = 0; c < 3; ++c) {
    EXPECT_EQ(row.item_as_double(std::vector<int64_t>{c}),
              w.item_as_double(std::vector<int64_t>{2, c}));
  }
}

TEST(AtenEmbedding, Errors) {
  Tensor w = random_tensor({4, 3}, DType::f32, 1);
  Tensor idx = Tensor::empty({3}, DType::i64);
  store_double(idx.view(), 1, 4);
  expect_error([&] { call("aten::embedding", {w, idx}); },
               "aten::embedding: index 4 (element 1 of indices) is out of range for weight with 4 "
               "rows");
  store_double(idx.view(), 1, -1);
  expect_error([&] { call("aten::embedding", {w, idx}); },
               "aten::embedding: index -1 (element 1 of indices) is out of range");
  Tensor f = Tensor::empty({3}, DType::f32);
  expect_error([&] { call("aten::embedding", {w, f}); },
               "aten::embedding: indices has dtype f32, which is not supported (expected i64 or "
               "i32)");
  Tensor w3 = random_tensor({4, 3, 2}, DType::f32, 1);
  expect_error([&] { call("aten::embedding", {w3, idx}); },
               "aten::embedding: weight must be 2-D [num_embeddings, embedding_dim], got shape "
               "[4, 3, 2]");
}

}  // namespace
}  // namespace symmflow::test
