// The cuda kernels of the ops a Llama-style decoder block adds (rsqrt, pow.Tensor_Scalar, amax,
// embedding, scaled_dot_product_attention, the views permute / expand / unsqueeze / _unsafe_view,
// _to_copy f32 <-> bf16, the rotary slice/neg/cat pattern, split_with_sizes / split.Tensor,
// native_layer_norm, index_put with a bool mask, index_put accumulate=True with integer indices,
// reciprocal and integer sums, fused::rotary_embedding) against the cpu kernels on the same inputs, every element: odd sizes, 1-sized dims, grouped KV heads 4:1 and 2:1, L = 1 and 17,
// permuted (strided) q/k/v read in place, f32/bf16/f16/f64; and the refusals that are the GPU's
// own (a key length past shared memory). Skipped without a GPU.
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "attention_inputs.hpp"
#include "support/tensors.hpp"

#include "symmflow/core/error.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

class CudaLlamaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no GPU";
    bind_device();
  }
};

Tensor random(const Shape& shape, DType dtype, uint64_t seed, double lo = -2, double hi = 2) {
  return symmflow::testing::random_tensor(shape, dtype, seed, lo, hi);
}

double tol(DType d) {
  switch (d) {
    case DType::bf16: return 2e-2;
    case DType::f16: return 2e-3;
    case DType::f32: return 1e-5;
    default: return 1e-12;
  }
}

// Every element of `got` (GPU) against `want` (cpu), within tol * max(|want|, 1); tol 0: equal.
void expect_close(const Tensor& got_gpu, const Tensor& want, double tolerance,
                  const std::string& what) {
  Tensor got = to_host(got_gpu);
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  std::vector<double> a = got.to_doubles(), b = want.to_doubles();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (a[i] == b[i]) continue;  // infinities too
    ASSERT_LE(std::abs(a[i] - b[i]), tolerance * std::max(1.0, std::abs(b[i])))
        << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

Tensor cpu_t(std::string_view op, const std::vector<Value>& args, const KwArgs& kw = {}) {
  return call(op, args, kw).to_tensor();
}

TEST_F(CudaLlamaOps, RsqrtAndPowMatchCpu) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (int64_t n : {1, 7, 1023, 4099}) {
      Tensor x = random({n}, d, 3, 0.25, 4);
      Tensor gx = to_device(x);
      expect_close(cpu_t("aten::rsqrt", {gx}), cpu_t("aten::rsqrt", {x}), tol(d),
                   fmt::format("rsqrt {} n={}", dtype_name(d), n));
      for (double e : {2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.7}) {
        expect_close(cpu_t("aten::pow.Tensor_Scalar", {gx, e}),
                     cpu_t("aten::pow.Tensor_Scalar", {x, e}), 4 * tol(d),
                     fmt::format("pow {} {} n={}", e, dtype_name(d), n));
      }
    }
  }
  // x ** 2 is x * x on the GPU too, bit for bit.
  Tensor x = random({4099}, DType::f32, 4);
  expect_close(cpu_t("aten::pow.Tensor_Scalar", {to_device(x), int64_t(2)}),
               cpu_t("aten::mul.Tensor", {x, x}), 0, "pow 2 bitwise");
}

TEST_F(CudaLlamaOps, AmaxMatchesCpuBitwise) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    Tensor x = random({3, 1, 1023}, d, 5);
    for (auto dims : {std::vector<int64_t>{-1}, std::vector<int64_t>{0}, std::vector<int64_t>{0, 2},
                      std::vector<int64_t>{}}) {
      for (bool keep : {false, true}) {
        expect_close(cpu_t("aten::amax", {to_device(x), dims, keep}),
                     cpu_t("aten::amax", {x, dims, keep}), 0,
                     fmt::format("amax {} dims={} keep={}", dtype_name(d), dims.size(), keep));
      }
    }
  }
}

TEST_F(CudaLlamaOps, EmbeddingMatchesCpu) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (DType it : {DType::i64, DType::i32}) {
      Tensor w = random({11, 7}, d, 6);
      Tensor idx = Tensor::empty({3, 5}, it);
      for (int64_t n = 0; n < 15; ++n) store_double(idx.view(), n, double((n * 7) % 11));
      expect_close(cpu_t("aten::embedding", {to_device(w), to_device(idx)}),
                   cpu_t("aten::embedding", {w, idx}), 0, "embedding");
      // A transposed weight is read through its strides.
      Tensor w7 = random({7, 11}, d, 7);
      expect_close(cpu_t("aten::embedding", {cpu_t("aten::t", {to_device(w7)}), to_device(idx)}),
                   cpu_t("aten::embedding", {cpu_t("aten::t", {w7}), idx}), 0,
                   "embedding strided weight");
    }
  }
}

using testing::attention_input;

TEST_F(CudaLlamaOps, AttentionMatchesCpu) {
  struct Case {
    int64_t b, h, hkv, l, s, e, ev;
    bool causal;
  };
  const Case cases[] = {{2, 8, 2, 17, 17, 7, 7, true},  {1, 4, 2, 1, 9, 5, 3, true},
                        {1, 2, 2, 3, 5, 4, 4, true},    {1, 2, 1, 6, 3, 3, 5, true},
                        {3, 3, 3, 17, 4, 1, 2, false},  {1, 1, 1, 1, 1, 1, 1, true},
                        {1, 4, 1, 2, 300, 64, 64, true},
                        {1, 16, 4, 16, 16, 128, 128, true},  // a TP2 decoder layer's shape
                        {1, 16, 4, 1, 4096, 128, 128, false},  // decode: keys split over blocks
                        {1, 2, 2, 3, 40, 33, 31, false}};    // head dims past one warp
  uint64_t seed = 1;
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (const Case& c : cases) {
      for (bool permuted : {false, true}) {
        auto [q, gq] = attention_input(c.b, c.h, c.l, c.e, d, seed++, permuted);
        auto [k, gk] = attention_input(c.b, c.hkv, c.s, c.e, d, seed++, permuted);
        auto [v, gv] = attention_input(c.b, c.hkv, c.s, c.ev, d, seed++, permuted);
        KwArgs kw{{"is_causal", c.causal}, {"enable_gqa", c.h != c.hkv}};
        ASSERT_EQ(gq.strides(), q.strides());
        expect_close(cpu_t("aten::scaled_dot_product_attention", {gq, gk, gv}, kw),
                     cpu_t("aten::scaled_dot_product_attention", {q, k, v}, kw), tol(d),
                     fmt::format("sdpa {} H={} Hkv={} L={} S={} permuted={}", dtype_name(d), c.h,
                                 c.hkv, c.l, c.s, permuted));
      }
    }
  }
}

// Note [attention masks]: bool masks broadcast from [L, S] and [B, 1, L, S] (a row all dropped)
// and an additive [B, H, L, S] mask, on permuted inputs, equal to the CPU kernel.
TEST_F(CudaLlamaOps, MaskedAttentionMatchesCpu) {
  const int64_t b = 2, h = 4, hkv = 2, l = 5, s = 7, e = 6;
  uint64_t seed = 50;
  for (DType d : {DType::f32, DType::bf16, DType::f64}) {
    auto [q, gq] = attention_input(b, h, l, e, d, seed++, true);
    auto [k, gk] = attention_input(b, hkv, s, e, d, seed++, true);
    auto [v, gv] = attention_input(b, hkv, s, e, d, seed++, false);
    Tensor m2 = Tensor::empty({l, s}, DType::boolean);
    for (int64_t n = 0; n < l * s; ++n) store_double(m2.view(), n, (n % 3) != 0);
    Tensor m4 = Tensor::empty({b, 1, l, s}, DType::boolean);
    for (int64_t n = 0; n < b * l * s; ++n) store_double(m4.view(), n, (n / s) % l != 1 && n % 4);
    Tensor add = random({b, h, l, s}, d, seed++);
    for (const Tensor& mask : {m2, m4, add}) {
      KwArgs kw{{"enable_gqa", true}};
      expect_close(cpu_t("aten::scaled_dot_product_attention", {gq, gk, gv, to_device(mask)}, kw),
                   cpu_t("aten::scaled_dot_product_attention", {q, k, v, mask}, kw), tol(d),
                   fmt::format("masked sdpa {} mask {}", dtype_name(d), shape_str(mask.shape())));
    }
  }
}

// Note [attention tiles]: keys past one tile (here 12289 in float, 6112 in f64: the forward's
// former limit) run through the online softmax, causal and masked included; head dims whose rows
// do not fit in shared memory are refused, named.
TEST_F(CudaLlamaOps, AttentionTakesAnyKeyLengthAndRefusesHugeHeads) {
  uint64_t seed = 70;
  for (DType d : {DType::f32, DType::bf16, DType::f64}) {
    for (bool causal : {false, true}) {
      auto [q, gq] = attention_input(1, 2, 3, 8, d, seed++, true);
      auto [k, gk] = attention_input(1, 1, 12289, 8, d, seed++, false);
      auto [v, gv] = attention_input(1, 1, 12289, 5, d, seed++, true);
      KwArgs kw{{"is_causal", causal}, {"enable_gqa", true}};
      expect_close(cpu_t("aten::scaled_dot_product_attention", {gq, gk, gv}, kw),
                   cpu_t("aten::scaled_dot_product_attention", {q, k, v}, kw), tol(d),
                   fmt::format("sdpa {} S=12289 causal={}", dtype_name(d), causal));
    }
    // A bool mask that drops whole tiles at the start of some rows and every key of one row.
    auto [q, gq] = attention_input(1, 2, 4, 16, d, seed++, false);
    auto [k, gk] = attention_input(1, 2, 300, 16, d, seed++, false);
    auto [v, gv] = attention_input(1, 2, 300, 16, d, seed++, false);
    Tensor m = Tensor::empty({4, 300}, DType::boolean);
    for (int64_t n = 0; n < 4 * 300; ++n) {
      const int64_t i = n / 300, j = n % 300;
      store_double(m.view(), n, i != 2 && j >= 150 * i && j % 7 != 0);
    }
    expect_close(cpu_t("aten::scaled_dot_product_attention", {gq, gk, gv, to_device(m)}),
                 cpu_t("aten::scaled_dot_product_attention", {q, k, v, m}), tol(d),
                 fmt::format("masked sdpa {} S=300", dtype_name(d)));
  }
  Tensor q = to_device(random({1, 1, 1, 6200}, DType::f32, 1));
  try {
    call("aten::scaled_dot_product_attention", {q, q, q});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "; own: head dims 6200 and 6200 need 99204 bytes of shared memory, at most "
                  "48896 fit"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CudaLlamaOps, ViewsRotaryAndToCopyMatchCpu) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    Tensor base = random({2, 5, 3, 8}, d, 9);
    Tensor gbase = to_device(base);
    auto rotary = [](const Tensor& b) {
      Tensor x = cpu_t("aten::permute", {b, std::vector<int64_t>{0, 2, 1, 3}});
      Tensor x1 = cpu_t("aten::slice.Tensor", {x, int64_t(-1), int64_t(0), int64_t(4)});
      Tensor x2 = cpu_t("aten::slice.Tensor", {x, int64_t(-1), int64_t(4), Value()});
      return cpu_t("aten::cat", {std::vector<Tensor>{cpu_t("aten::neg", {x2}), x1}, int64_t(-1)});
    };
    expect_close(rotary(gbase), rotary(base), 0, "rotary");
    auto views = [](const Tensor& b) {
      Tensor u = cpu_t("aten::unsqueeze", {b, int64_t(2)});                      // [2, 5, 1, 3, 8]
      Tensor e = cpu_t("aten::expand", {u, std::vector<int64_t>{2, 5, 4, 3, 8}});
      Tensor c = cpu_t("aten::clone", {e});
      return cpu_t("aten::_unsafe_view", {c, std::vector<int64_t>{2, 20, 3, 8}});
    };
    expect_close(views(gbase), views(base), 0, "unsqueeze/expand/clone/_unsafe_view");
  }
  Tensor x = random({3, 17}, DType::f32, 10);
  Tensor gb = cpu_t("aten::_to_copy", {to_device(x)}, {{"dtype", DType::bf16}});
  expect_close(gb, cpu_t("aten::_to_copy", {x}, {{"dtype", DType::bf16}}), 0, "_to_copy f32->bf16");
  Tensor b = to_host(gb);
  expect_close(cpu_t("aten::_to_copy", {gb}, {{"dtype", DType::f32}}),
               cpu_t("aten::_to_copy", {b}, {{"dtype", DType::f32}}), 0, "_to_copy bf16->f32");
}

// fused::rotary_embedding (raise_rotary's op) on the GPU equals the aten chain it replaces run on
// the CPU, bit for bit: x a permuted [S, H, D] view read in place (the decoder layer's q, and a
// head dim of 128 with 16 tokens, 16 heads), cos and sin broadcast over the heads, odd sizes.
TEST_F(CudaLlamaOps, FusedRotaryEqualsTheChainBitwise) {
  struct Case {
    int64_t s, h, d;
  };
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    // 16-byte packs where the layout allows (Note [rotary vectors]: [16, 16, 128] in every
    // dtype, [3, 2, 32]; [5, 4, 8] in f32 and f64), the scalar kernel elsewhere.
    for (Case c : {Case{7, 3, 10}, Case{16, 16, 128}, Case{1, 1, 2}, Case{3, 2, 32},
                   Case{5, 4, 8}}) {
      Tensor q = random({c.s, c.h, c.d}, d, 21), cos = random({c.s, c.d}, d, 22, -1, 1);
      Tensor sin = random({c.s, c.d}, d, 23, -1, 1);
      auto chain = [&](const Tensor& qq, const Tensor& cc, const Tensor& ss) {
        Tensor x = cpu_t("aten::permute", {qq, std::vector<int64_t>{1, 0, 2}});
        Tensor x1 = cpu_t("aten::slice.Tensor", {x, int64_t(-1), int64_t(0), c.d / 2});
        Tensor x2 = cpu_t("aten::slice.Tensor", {x, int64_t(-1), c.d / 2, Value()});
        Tensor r = cpu_t("aten::cat", {std::vector<Tensor>{cpu_t("aten::neg", {x2}), x1}, int64_t(-1)});
        return cpu_t("aten::add.Tensor",
                     {cpu_t("aten::mul.Tensor", {x, cc}), cpu_t("aten::mul.Tensor", {r, ss})});
      };
      Tensor gq = to_device(q);
      Tensor gx = cpu_t("aten::permute", {gq, std::vector<int64_t>{1, 0, 2}});
      Tensor got = cpu_t("fused::rotary_embedding", {gx, to_device(cos), to_device(sin)});
      expect_close(got, chain(q, cos, sin), 0,
                   fmt::format("{} [{}, {}, {}]", dtype_name(d), c.s, c.h, c.d));
    }
  }
}

// The ops with several results (Note [list returns]): split_with_sizes / split.Tensor give views
// of the GPU tensor (same storage, the CPU's pieces), native_layer_norm's out, mean and rstd
// match the CPU's (16-bit inputs with f32 statistics; with and without weight and bias; an
// empty row: mean 0, rstd NaN), a piece as the input of a later op included.
TEST_F(CudaLlamaOps, SplitsAndNativeLayerNormMatchCpu) {
  Tensor x = random({6, 10}, DType::bf16, 40);
  Tensor gx = to_device(x);
  std::vector<Tensor> pieces = call("aten::split_with_sizes", {gx, std::vector<int64_t>{3, 0, 7}, 1})
                                   .to_tensor_list();
  std::vector<Tensor> want = call("aten::split_with_sizes", {x, std::vector<int64_t>{3, 0, 7}, 1})
                                 .to_tensor_list();
  ASSERT_EQ(pieces.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(pieces[i].storage(), gx.storage()) << "piece " << i;
    EXPECT_EQ(pieces[i].device().type, DeviceType::cuda);
    expect_close(pieces[i], want[i], 0, fmt::format("split_with_sizes piece {}", i));
  }
  std::vector<Tensor> parts = call("aten::split.Tensor", {gx, int64_t(4)}).to_tensor_list();
  ASSERT_EQ(parts.size(), 2u);
  expect_close(parts[1], call("aten::split.Tensor", {x, int64_t(4)}).to_tensor_list()[1], 0,
               "split.Tensor last piece");
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (int64_t n : {1, 7, 1023, 4099}) {
      for (int affine = 0; affine < 4; ++affine) {
        Tensor in = random({3, 2, n}, d, 41), w = random({n}, d, 42), b = random({n}, d, 43);
        auto args = [&](bool gpu) {
          auto on = [&](const Tensor& t) { return gpu ? to_device(t) : t; };
          return std::vector<Value>{on(in), std::vector<int64_t>{n},
                                    affine & 1 ? Value(on(w)) : Value(None{}),
                                    affine & 2 ? Value(on(b)) : Value(None{}), 1e-5};
        };
        std::vector<Tensor> got = call("aten::native_layer_norm", args(true)).to_tensor_list();
        std::vector<Tensor> ref = call("aten::native_layer_norm", args(false)).to_tensor_list();
        ASSERT_EQ(got.size(), 3u);
        std::string what = fmt::format("native_layer_norm {} n={} affine={}", dtype_name(d), n,
                                       affine);
        expect_close(got[0], ref[0], tol(d), what + " out");
        const DType stats = d == DType::f64 ? DType::f64 : DType::f32;
        EXPECT_EQ(got[1].dtype(), stats) << what;
        expect_close(got[1], ref[1], tol(stats), what + " mean");
        expect_close(got[2], ref[2], tol(stats) * 10, what + " rstd");
      }
    }
  }
  // A strided piece of a GPU tensor as the input; an empty row.
  Tensor big = random({4, 24}, DType::bf16, 44);
  Tensor gpiece = call("aten::split.Tensor", {to_device(big), int64_t(16), int64_t(1)})
                      .to_tensor_list()[0];
  Tensor piece = call("aten::split.Tensor", {big, int64_t(16), int64_t(1)}).to_tensor_list()[0];
  std::vector<Value> none{std::vector<int64_t>{16}, None{}, None{}, 1e-5};
  std::vector<Value> gargs{gpiece}, cargs{piece};
  gargs.insert(gargs.end(), none.begin(), none.end());
  cargs.insert(cargs.end(), none.begin(), none.end());
  expect_close(call("aten::native_layer_norm", gargs).to_tensor_list()[0],
               call("aten::native_layer_norm", cargs).to_tensor_list()[0], tol(DType::bf16),
               "native_layer_norm of a strided piece");
  std::vector<Tensor> empty =
      call("aten::native_layer_norm", {to_device(Tensor::empty({2, 0}, DType::f32)),
                                       std::vector<int64_t>{0}, None{}, None{}, 1e-5})
          .to_tensor_list();
  std::vector<double> mean = to_host(empty[1]).to_doubles(), rstd = to_host(empty[2]).to_doubles();
  EXPECT_EQ(mean, (std::vector<double>{0, 0}));
  EXPECT_TRUE(std::isnan(rstd[0]) && std::isnan(rstd[1]));
}

// index_put's bool-mask form on the GPU equals the CPU's (a 0-dim f32 value on bf16, values over
// the remaining dims, accumulate).
TEST_F(CudaLlamaOps, IndexPutMaskMatchesCpu) {
  for (DType d : {DType::f32, DType::bf16}) {
    Tensor x = random({3, 5, 33}, d, 50);
    Tensor mask = Tensor::empty({3, 5}, DType::boolean);
    for (int64_t i = 0; i < 15; ++i) store_double(mask.view(), i, i % 3 == 0 ? 1 : 0);
    Tensor zero = Tensor::full({}, DType::f32, 0), v = random({33}, d, 51);
    for (bool acc : {false, true}) {
      for (const Tensor& vals : {zero, v}) {
        if (acc && vals.dim() == 0) continue;
        std::vector<Value> cpu{x, std::vector<Tensor>{mask}, vals, acc};
        std::vector<Value> gpu{to_device(x), std::vector<Tensor>{to_device(mask)},
                               to_device(vals), acc};
        expect_close(cpu_t("aten::index_put", gpu), cpu_t("aten::index_put", cpu), 0,
                     fmt::format("index_put {} values {} accumulate {}", dtype_name(d),
                                 vals.dim(), acc));
      }
    }
  }
}

// index_put's integer form on the GPU equals the CPU's for distinct indices (transformers' MoE:
// inv_perm[perm] = arange), negative ones, two index tensors, broadcast values and a 0-dim value
// of another dtype; accumulate=True of a bool self is refused on the GPU, naming the op.
TEST_F(CudaLlamaOps, IndexPutIntegerIndicesMatchCpu) {
  for (DType d : {DType::f32, DType::bf16, DType::i64}) {
    for (DType it : {DType::i64, DType::i32}) {
      Tensor x = random({6, 7}, d, 60);
      Tensor perm = Tensor::empty({6}, it), rows = Tensor::empty({3}, it), cols = Tensor::empty({3}, it);
      const int p[6] = {3, 0, 5, 1, 4, 2};
      for (int64_t i = 0; i < 6; ++i) store_double(perm.view(), i, p[i]);
      for (int64_t i = 0; i < 3; ++i) store_double(rows.view(), i, -1 - i);  // negative: from the end
      for (int64_t i = 0; i < 3; ++i) store_double(cols.view(), i, 2 * i);
      const std::vector<std::pair<std::vector<Tensor>, Tensor>> cases = {
          {{perm}, random({6, 7}, d, 61)},                      // a permutation of rows
          {{perm}, random({7}, d, 62)},                         // values broadcast over rows
          {{rows, cols}, random({3}, d, 63)},                   // two index tensors
          {{perm}, Tensor::full({}, d == DType::f32 ? DType::bf16 : DType::f32, 1.5)},  // 0-dim, converted
      };
      for (size_t c = 0; c < cases.size(); ++c) {
        if (c == 3 && d == DType::i64) continue;  // float to integer conversion: not this test's
        std::vector<Tensor> gidx;
        for (const Tensor& t : cases[c].first) gidx.push_back(to_device(t));
        std::vector<Value> cpu{x, cases[c].first, cases[c].second, false};
        std::vector<Value> gpu{to_device(x), gidx, to_device(cases[c].second), false};
        expect_close(cpu_t("aten::index_put", gpu), cpu_t("aten::index_put", cpu), 0,
                     fmt::format("index_put {} indices {} case {}", dtype_name(d), dtype_name(it), c));
      }
    }
  }
  Tensor idx = Tensor::empty({1}, DType::i64);
  store_double(idx.view(), 0, 1);
  try {
    call("aten::index_put", {to_device(random({3, 4}, DType::boolean, 52)),
                             std::vector<Tensor>{to_device(idx)},
                             to_device(Tensor::full({}, DType::boolean, 1)), true});
    ADD_FAILURE() << "accumulate of bool with integer indices on the GPU was not refused";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "aten::index_put: accumulate=True with integer index tensors has no cuda kernel");
  }
}

// index_put accumulate=True with integer indices (the embedding backward: repeated token ids)
// on the GPU against the CPU: duplicates sum, negative indices, two index tensors, broadcast
// values, i32 indices; integers exactly (values small enough for any summation order), floats
// within the order-dependent rounding of a few adds.
TEST_F(CudaLlamaOps, IndexPutAccumulateMatchesCpu) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i64, DType::i32}) {
    for (DType it : {DType::i64, DType::i32}) {
      Tensor x = random({6, 7}, d, 70);
      Tensor ids = Tensor::empty({9}, it), rows = Tensor::empty({4}, it), cols = Tensor::empty({4}, it);
      const int v[9] = {1, 3, 1, 1, -1, 5, 0, 3, 2};  // 1 three times, 3 and 5 (as -1) twice
      for (int64_t i = 0; i < 9; ++i) store_double(ids.view(), i, v[i]);
      for (int64_t i = 0; i < 4; ++i) store_double(rows.view(), i, i % 2);
      for (int64_t i = 0; i < 4; ++i) store_double(cols.view(), i, 6 - (i % 2));
      const std::vector<std::pair<std::vector<Tensor>, Tensor>> cases = {
          {{ids}, random({9, 7}, d, 71)},    // embedding backward: rows of gradients
          {{ids}, random({7}, d, 72)},       // broadcast over the indexed rows
          {{rows, cols}, random({4}, d, 73)},  // two index tensors, pairs repeated
      };
      for (size_t c = 0; c < cases.size(); ++c) {
        std::vector<Tensor> gidx;
        for (const Tensor& t : cases[c].first) gidx.push_back(to_device(t));
        std::vector<Value> cpu{x, cases[c].first, cases[c].second, true};
        std::vector<Value> gpu{to_device(x), gidx, to_device(cases[c].second), true};
        const bool exact = d == DType::i64 || d == DType::i32;
        expect_close(cpu_t("aten::index_put", gpu), cpu_t("aten::index_put", cpu),
                     exact ? 0 : 4 * tol(d),
                     fmt::format("index_put accumulate {} indices {} case {}", dtype_name(d),
                                 dtype_name(it), c));
      }
    }
  }
}

// reciprocal on the GPU against the CPU: every float dtype (zeros give inf on both), and integer
// and bool inputs promoted to f32 as PyTorch does; the .out and in-place variants.
TEST_F(CudaLlamaOps, ReciprocalMatchesCpu) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i64, DType::i32,
                  DType::boolean}) {
    for (int64_t n : {1, 7, 1031}) {
      Tensor x = random({n}, d, 80);
      Tensor got = cpu_t("aten::reciprocal", {to_device(x)});
      expect_close(got, cpu_t("aten::reciprocal", {x}), is_floating(d) ? tol(d) : tol(DType::f32),
                   fmt::format("reciprocal {} n={}", dtype_name(d), n));
    }
  }
  Tensor x = random({5, 3}, DType::bf16, 81);
  Tensor out = to_device(Tensor::empty({5, 3}, DType::bf16));
  call("aten::reciprocal.out", {to_device(x)}, {{"out", out}});
  expect_close(out, cpu_t("aten::reciprocal", {x}), tol(DType::bf16), "reciprocal.out");
  Tensor self = to_device(x);
  call("aten::reciprocal_", {self});
  expect_close(self, cpu_t("aten::reciprocal", {x}), tol(DType::bf16), "reciprocal_");
}

// sum.dim_IntList of i64, i32, i8 and bool tensors on the GPU equals the CPU's exactly (i64
// results), over every dim set, with keepdim, a transposed input, the out variant; an i64 sum past
// 2^53 stays exact (int64 accumulation).
TEST_F(CudaLlamaOps, IntegerSumsMatchCpu) {
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {0}, {-1}, {0, 2}, {2, 1}, {1}};
  for (DType d : {DType::i64, DType::i32, DType::i8, DType::boolean}) {
    for (Shape shape : {Shape{5, 3, 67}, Shape{2, 1, 300}, Shape{1, 0, 3}}) {
      Tensor x = random(shape, d, 90, -100, 100);
      Tensor gx = to_device(x);
      Tensor gt = call("aten::transpose.int", {gx, int64_t(0), int64_t(2)}).to_tensor();
      Tensor xt = call("aten::transpose.int", {x, int64_t(0), int64_t(2)}).to_tensor();
      for (const auto& dims : dim_sets) {
        for (bool keepdim : {false, true}) {
          const std::string what = fmt::format("sum {} {} dims [{}] keepdim {}", dtype_name(d),
                                               shape_str(shape), fmt::join(dims, ","), keepdim);
          Tensor got = cpu_t("aten::sum.dim_IntList", {gx, dims, keepdim});
          EXPECT_EQ(got.dtype(), DType::i64) << what;
          expect_close(got, cpu_t("aten::sum.dim_IntList", {x, dims, keepdim}), 0, what);
          expect_close(cpu_t("aten::sum.dim_IntList", {gt, dims, keepdim}),
                       cpu_t("aten::sum.dim_IntList", {xt, dims, keepdim}), 0,
                       "transposed " + what);
        }
      }
    }
  }
  const int64_t big = (int64_t(1) << 53) + 1;
  Tensor x = Tensor::from_vector<int64_t>({big, 1, 1, -big, 2, 3}, {2, 3});
  Tensor rows = to_host(cpu_t("aten::sum.dim_IntList", {to_device(x), std::vector<int64_t>{1}}));
  EXPECT_EQ(rows.data<int64_t>()[0], big + 2);
  EXPECT_EQ(rows.data<int64_t>()[1], -big + 5);
  Tensor out = to_device(Tensor::empty({3}, DType::i64));
  call("aten::sum.IntList_out", {to_device(x), std::vector<int64_t>{0}}, {{"out", out}});
  EXPECT_EQ(to_host(out).to_doubles(), (std::vector<double>{0, 3, 4}));
}

}  // namespace
}  // namespace symmflow::cuda
