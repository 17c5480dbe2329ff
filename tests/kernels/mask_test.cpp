// The mask ops of a decomposed causal attention (arange.start_step, le.Scalar, eq.Scalar,
// logical_and, logical_not, any.dim, where.self, full_like, scalar_tensor): every element against
// a reference, broadcasting, promotion, the error text of bad arguments; and the whole sequence
// torch 2.13's core ATen decomposition makes of scaled_dot_product_attention(is_causal=True,
// enable_gqa=True) (recorded from an AOT trace), run op by op, against the attention op.
#include "test_util.hpp"

namespace symmflow::test {
namespace {

Tensor from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  for (size_t i = 0; i < values.size(); ++i) store_double(t.view(), int64_t(i), values[i]);
  return t;
}

TEST(AtenMask, Arange) {
  Tensor a = call_t("aten::arange.start_step", {int64_t(0), int64_t(5)});
  EXPECT_EQ(a.dtype(), DType::i64);
  EXPECT_EQ(a.to_doubles(), (std::vector<double>{0, 1, 2, 3, 4}));
  Tensor b = call_t("aten::arange.start_step", {int64_t(5), int64_t(0), int64_t(-2)});
  EXPECT_EQ(b.to_doubles(), (std::vector<double>{5, 3, 1}));
  Tensor c = call_t("aten::arange.start_step", {0.5, int64_t(2), 0.5});
  EXPECT_EQ(c.dtype(), DType::f32);
  EXPECT_EQ(c.to_doubles(), (std::vector<double>{0.5, 1, 1.5}));
  Tensor d = call_t("aten::arange.start_step", {int64_t(0), int64_t(3)}, {{"dtype", DType::bf16}});
  EXPECT_EQ(d.dtype(), DType::bf16);
  EXPECT_EQ(call_t("aten::arange.start_step", {int64_t(2), int64_t(2)}).numel(), 0);
  expect_error([&] { call("aten::arange.start_step", {int64_t(0), int64_t(3), int64_t(0)}); },
               "aten::arange.start_step: step must be nonzero");
  expect_error([&] { call("aten::arange.start_step", {int64_t(3), int64_t(0)}); },
               "aten::arange.start_step: upper bound and larger bound inconsistent with step sign");
}

TEST(AtenMask, ComparisonsAndLogic) {
  Tensor x = from_doubles({-1, 0, 2, NAN, -INFINITY, 0.5}, {2, 3}, DType::f32);
  EXPECT_EQ(call_t("aten::le.Scalar", {x, int64_t(0)}).to_doubles(),
            (std::vector<double>{1, 1, 0, 0, 1, 0}));
  Tensor eq = call_t("aten::eq.Scalar", {x, -INFINITY});
  EXPECT_EQ(eq.dtype(), DType::boolean);
  EXPECT_EQ(eq.to_doubles(), (std::vector<double>{0, 0, 0, 0, 1, 0}));
  Tensor i = from_doubles({3, -4, 0}, {3}, DType::i64);
  EXPECT_EQ(call_t("aten::le.Scalar", {i, int64_t(0)}).to_doubles(),
            (std::vector<double>{0, 1, 1}));
  Tensor n = call_t("aten::logical_not", {x});
  EXPECT_EQ(n.dtype(), DType::boolean);
  EXPECT_EQ(n.to_doubles(), (std::vector<double>{0, 1, 0, 0, 0, 0}));  // NaN is true
  Tensor row = from_doubles({1, 0, 1}, {3}, DType::boolean);
  Tensor col = from_doubles({1, 0}, {2, 1}, DType::boolean);
  Tensor both = call_t("aten::logical_and", {col, row});
  ASSERT_EQ(both.shape(), (Shape{2, 3}));
  EXPECT_EQ(both.to_doubles(), (std::vector<double>{1, 0, 1, 0, 0, 0}));
  Tensor bad = Tensor::empty({4}, DType::boolean);
  expect_error([&] { call("aten::logical_and", {row, bad}); },
               "aten::logical_and: self with shape [3] and other with shape [4] do not broadcast");
  expect_error([&] { call("aten::eq.Scalar", {x, row}); },
               "aten::eq.Scalar: argument 'other' expects Scalar but got Tensor (bool[3])");
}

TEST(AtenMask, AnyDim) {
  Tensor x = from_doubles({0, 0, 0, 0, 1, 0, NAN, 0, 0, 0, 0, 0}, {2, 2, 3}, DType::f32);
  Tensor a = call_t("aten::any.dim", {x, int64_t(-1), true});
  ASSERT_EQ(a.shape(), (Shape{2, 2, 1}));
  EXPECT_EQ(a.dtype(), DType::boolean);
  EXPECT_EQ(a.to_doubles(), (std::vector<double>{0, 1, 1, 0}));
  Tensor b = call_t("aten::any.dim", {call_t("aten::permute", {x, std::vector<int64_t>{2, 0, 1}}),
                                      int64_t(0)});
  ASSERT_EQ(b.shape(), (Shape{2, 2}));
  EXPECT_EQ(b.to_doubles(), (std::vector<double>{0, 1, 1, 0}));
  expect_error([&] { call("aten::any.dim", {x, int64_t(3)}); },
               "dim 3 out of range for a tensor of rank 3");
}

// Note [typed where]: every dtype, each operand broadcast or strided in turn, against a naive
// reference element by element.
TEST(AtenMask, WhereEveryDtypeBroadcastAndStrided) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64,
                   DType::i8, DType::boolean}) {
    Tensor cond = call_t("aten::gt.Scalar", {random_tensor({3, 5}, DType::f32, 7), 0.0});
    Tensor a = random_tensor({3, 5}, DType::f32, 8);
    Tensor b = random_tensor({5, 3}, DType::f32, 9);
    a = call_t("aten::_to_copy", {call_t("aten::mul.Scalar", {a, 9.0})}, {{"dtype", dt}});
    b = call_t("aten::_to_copy", {call_t("aten::mul.Scalar", {b, 9.0})}, {{"dtype", dt}});
    Tensor bt = call_t("aten::permute", {b, std::vector<int64_t>{1, 0}});  // strided [3, 5]
    Tensor row = call_t("aten::slice.Tensor", {a, int64_t(0), int64_t(0), int64_t(1)});  // [1, 5]
    Tensor col = call_t("aten::slice.Tensor", {cond, int64_t(1), int64_t(0), int64_t(1)});  // [3, 1]
    struct Case { Tensor c, x, y; };
    for (const Case& k : {Case{cond, a, bt}, Case{cond, row, bt}, Case{col, a, row},
                          Case{cond, bt, row}, Case{col, bt, a}}) {
      Tensor got = call_t("aten::where.self", {k.c, k.x, k.y});
      ASSERT_EQ(got.shape(), (Shape{3, 5}));
      EXPECT_EQ(got.dtype(), dt);
      auto at = [](const Tensor& t, int64_t i, int64_t j) {
        Tensor e = call_t("aten::expand", {t, std::vector<int64_t>{3, 5}});
        return call_t("aten::clone", {e}).to_doubles()[size_t(i * 5 + j)];
      };
      std::vector<double> g = got.to_doubles();
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t j = 0; j < 5; ++j) {
          double want = at(k.c, i, j) != 0 ? at(k.x, i, j) : at(k.y, i, j);
          EXPECT_EQ(g[size_t(i * 5 + j)], want) << dtype_name(dt) << " at " << i << "," << j;
        }
      }
    }
  }
}

TEST(AtenMask, WhereFullLikeScalarTensor) {
  Tensor cond = from_doubles({1, 0, 0, 1}, {2, 2}, DType::boolean);
  Tensor a = from_doubles({1.5, 2.5}, {2}, DType::bf16);
  Tensor s = call_t("aten::scalar_tensor", {-INFINITY}, {{"dtype", DType::f32}});
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.dtype(), DType::f32);
  Tensor w = call_t("aten::where.self", {cond, a, s});  // a 0-dim f32 does not promote bf16
  EXPECT_EQ(w.dtype(), DType::bf16);
  EXPECT_EQ(w.to_doubles(), (std::vector<double>{1.5, -INFINITY, -INFINITY, 2.5}));
  Tensor f = random_tensor({2, 3}, DType::f32, 1);
  Tensor i = from_doubles({1, 2, 3}, {3}, DType::i64);
  Tensor wi = call_t("aten::where.self", {from_doubles({1, 0, 1}, {3}, DType::boolean), i, f});
  ASSERT_EQ(wi.shape(), (Shape{2, 3}));
  EXPECT_EQ(wi.dtype(), DType::f32);
  for (int64_t n = 0; n < 6; ++n) {
    double want = n % 3 == 1 ? f.to_doubles()[size_t(n)] : double(n % 3 + 1);
    EXPECT_EQ(wi.to_doubles()[size_t(n)], want);
  }
  expect_error([&] { call("aten::where.self", {f, f, f}); },
               "aten::where.self: condition has dtype f32, which is not supported (expected bool)");
  Tensor fl = call_t("aten::full_like", {f, int64_t(0)});
  EXPECT_EQ(fl.dtype(), DType::f32);
  EXPECT_EQ(fl.to_doubles(), std::vector<double>(6, 0.0));
  Tensor fb = call_t("aten::full_like", {f, true}, {{"dtype", DType::boolean}});
  EXPECT_EQ(fb.to_doubles(), std::vector<double>(6, 1.0));
}

// torch 2.13, core_aten_decompositions, F.scaled_dot_product_attention(q, k, v, is_causal=True,
// enable_gqa=True) with q [1, H, L, E] and k, v [1, Hkv, L, E]: the recorded op sequence.
// op(x, arg): most steps of the trace take one tensor and one literal.
Tensor op1(std::string_view op, const Tensor& x, const Value& arg) {
  return call_t(op, {x, arg});
}
std::vector<int64_t> dims(std::initializer_list<int64_t> d) { return d; }

Tensor decomposed_sdpa(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t H = q.shape()[1], Hkv = k.shape()[1], L = q.shape()[2], E = q.shape()[3];
  const double root_scale = std::sqrt(1 / std::sqrt(double(E)));
  Tensor qs = op1("aten::mul.Scalar", q, root_scale);
  Tensor ones = call_t("aten::full", {dims({L, L}), true}, {{"dtype", DType::boolean}});
  Tensor cols = op1("aten::unsqueeze", call_t("aten::arange.start_step", {int64_t(0), L}), -2);
  Tensor rows = op1("aten::unsqueeze", call_t("aten::arange.start_step", {int64_t(0), L}), -1);
  Tensor lower = op1("aten::le.Scalar", call_t("aten::sub.Tensor", {cols, rows}), int64_t(0));
  Tensor mask = call_t("aten::logical_and", {ones, lower});
  Tensor ninf = call_t("aten::scalar_tensor", {-INFINITY}, {{"dtype", DType::f32}});
  Tensor zero = call_t("aten::scalar_tensor", {0.0}, {{"dtype", DType::f32}});
  Tensor bias = call_t("aten::where.self", {mask, zero, ninf});
  auto repeat_kv = [&](const Tensor& t) {
    Tensor u = op1("aten::unsqueeze", t, int64_t(2));
    Tensor e = op1("aten::expand", u, dims({1, Hkv, H / Hkv, L, E}));
    return op1("aten::view", call_t("aten::clone", {e}), dims({1, H, L, E}));
  };
  Tensor kr = repeat_kv(k), vr = repeat_kv(v);
  Tensor kt = op1("aten::mul.Scalar", op1("aten::permute", kr, dims({0, 1, 3, 2})), root_scale);
  Tensor qv = op1("aten::view", op1("aten::expand", qs, dims({1, H, L, E})), dims({H, L, E}));
  Tensor kc = call_t("aten::clone", {op1("aten::expand", kt, dims({1, H, E, L}))});
  Tensor kv = op1("aten::_unsafe_view", kc, dims({H, E, L}));
  Tensor scores = op1("aten::view", call_t("aten::bmm", {qv, kv}), dims({1, H, L, L}));
  Tensor masked = call_t("aten::add.Tensor", {scores, bias});
  Tensor sm = call_t("aten::_softmax", {masked, int64_t(-1), false});
  Tensor live = call_t("aten::logical_not", {op1("aten::eq.Scalar", sm, -INFINITY)});
  Tensor any_live = call_t("aten::any.dim", {live, int64_t(-1), true});
  Tensor dead = call_t("aten::logical_not", {any_live});
  Tensor p = call_t("aten::where.self", {dead, op1("aten::full_like", sm, int64_t(0)), sm});
  Tensor pv = op1("aten::view", op1("aten::expand", p, dims({1, H, L, L})), dims({H, L, L}));
  Tensor vv = op1("aten::view", op1("aten::expand", vr, dims({1, H, L, E})), dims({H, L, E}));
  return op1("aten::view", call_t("aten::bmm", {pv, vv}), dims({1, H, L, E}));
}

TEST(AtenMask, DecomposedCausalAttentionEqualsTheOp) {
  for (auto [H, Hkv, L, E] :
       {std::tuple{4, 2, 5, 8}, std::tuple{8, 2, 17, 7}, std::tuple{2, 2, 1, 3}}) {
    Tensor q = random_tensor({1, H, L, E}, DType::f32, 1);
    Tensor k = random_tensor({1, Hkv, L, E}, DType::f32, 2);
    Tensor v = random_tensor({1, Hkv, L, E}, DType::f32, 3);
    Tensor want = call_t("aten::scaled_dot_product_attention", {q, k, v},
                         {{"is_causal", true}, {"enable_gqa", true}});
    expect_close(decomposed_sdpa(q, k, v), want.to_doubles(), DType::f32,
                 fmt::format("decomposed H={} Hkv={} L={}", H, Hkv, L));
  }
}

}  // namespace
}  // namespace symmflow::test
