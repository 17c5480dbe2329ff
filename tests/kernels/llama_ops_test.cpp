// The aten ops a Llama-style decoder block needs beyond the first catalogue: the views permute,
// expand, unsqueeze and _unsafe_view (storage shared, every element through the view vs the
// base), rsqrt and pow.Tensor_Scalar (every float dtype, strided inputs, the special exponents),
// amax (dims, keepdim, NaN, ints), the rotary-embedding pattern on non-contiguous halves
// (slice/neg/cat/mul/add) and _to_copy between f32 and bf16; each with the error text of bad
// arguments.
#include <limits>

#include "test_util.hpp"

namespace symmflow::test {
namespace {

double at(const Tensor& t, std::vector<int64_t> idx) { return t.item_as_double(idx); }

Tensor from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  for (size_t i = 0; i < values.size(); ++i) store_double(t.view(), int64_t(i), values[i]);
  return t;
}

TEST(AtenLlamaViews, PermuteSharesStorageAndReordersEveryElement) {
  for (DType dt : kAllDTypes) {
    for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
      Tensor x = random_tensor({2, 3, 5}, dt, 7, layout);
      Tensor p = call_t("aten::permute", {x, std::vector<int64_t>{2, 0, -2}});
      ASSERT_EQ(p.shape(), (Shape{5, 2, 3}));
      EXPECT_EQ(p.storage(), x.storage());
      for (int64_t a = 0; a < 5; ++a)
        for (int64_t b = 0; b < 2; ++b)
          for (int64_t c = 0; c < 3; ++c) ASSERT_EQ(at(p, {a, b, c}), at(x, {b, c, a}));
    }
  }
  Tensor s = random_tensor({}, DType::f32, 1);
  EXPECT_EQ(call_t("aten::permute", {s, std::vector<int64_t>{}}).shape(), Shape{});
}

TEST(AtenLlamaViews, PermuteErrors) {
  Tensor x = random_tensor({2, 3, 5}, DType::f32, 1);
  expect_error([&] { call("aten::permute", {x, std::vector<int64_t>{1, 0}}); },
               "aten::permute: dims has 2 entries but self has 3 dimensions (shape [2, 3, 5]); "
               "expected one entry per dimension");
  expect_error([&] { call("aten::permute", {x, std::vector<int64_t>{0, 1, -3}}); },
               "aten::permute: dim 0 appears more than once in dims [0, 1, -3]");
  expect_error([&] { call("aten::permute", {x, std::vector<int64_t>{0, 1, 3}}); },
               "dims entry 3 out of range for a tensor of rank 3");
}

TEST(AtenLlamaViews, ExpandBroadcastsWithStrideZero) {
  for (DType dt : kAllDTypes) {
    Tensor x = random_tensor({3, 1, 4}, dt, 3, Layout::strided);
    Tensor e = call_t("aten::expand", {x, std::vector<int64_t>{2, 3, 5, -1}});
    ASSERT_EQ(e.shape(), (Shape{2, 3, 5, 4}));
    EXPECT_EQ(e.strides()[0], 0);
    EXPECT_EQ(e.strides()[2], 0);
    EXPECT_EQ(e.storage(), x.storage());
    for (int64_t n = 0; n < e.numel(); ++n) {
      std::vector<int64_t> i = unravel(n, e.shape());
      ASSERT_EQ(at(e, i), at(x, {i[1], 0, i[3]}));
    }
    // implicit is accepted; expanding to the same shape is the identity.
    Tensor same = call_t("aten::expand", {x, std::vector<int64_t>{3, 1, 4}}, {{"implicit", true}});
    EXPECT_EQ(same.to_doubles(), x.to_doubles());
  }
  // A leading size 0 gives an empty view.
  Tensor x = random_tensor({2}, DType::f32, 1);
  EXPECT_EQ(call_t("aten::expand", {x, std::vector<int64_t>{0, 2}}).numel(), 0);
}

TEST(AtenLlamaViews, ExpandErrors) {
  Tensor x = random_tensor({3, 2}, DType::f32, 1);
  expect_error([&] { call("aten::expand", {x, std::vector<int64_t>{3, 4}}); },
               "aten::expand: the expanded size of the tensor (4) must match the existing size (2) "
               "at non-singleton dimension 1; target sizes [3, 4], tensor sizes [3, 2]");
  expect_error([&] { call("aten::expand", {x, std::vector<int64_t>{2}}); },
               "aten::expand: the number of sizes provided (1) must be greater or equal to the "
               "number of dimensions in the tensor (2)");
  expect_error([&] { call("aten::expand", {x, std::vector<int64_t>{-1, 3, 2}}); },
               "aten::expand: the expanded size -1 is not allowed in a leading, non-existing "
               "dimension 0");
}

TEST(AtenLlamaViews, UnsqueezeAndUnsafeView) {
  for (DType dt : kAllDTypes) {
    Tensor x = random_tensor({3, 4}, dt, 5, Layout::transposed);
    for (int64_t d : {0, 1, 2, -1, -3}) {
      Tensor u = call_t("aten::unsqueeze", {x, d});
      Shape want = {3, 4};
      want.insert(want.begin() + (d < 0 ? d + 3 : d), 1);
      ASSERT_EQ(u.shape(), want) << d;
      EXPECT_EQ(u.storage(), x.storage());
      EXPECT_EQ(u.to_doubles(), x.to_doubles()) << d;
    }
    Tensor c = random_tensor({2, 3, 4}, dt, 6);
    EXPECT_TRUE(call_t("aten::unsqueeze", {c, int64_t(1)}).is_contiguous());
    Tensor v = call_t("aten::_unsafe_view", {c, std::vector<int64_t>{6, -1}});
    ASSERT_EQ(v.shape(), (Shape{6, 4}));
    EXPECT_EQ(v.raw_data(), c.raw_data());
    EXPECT_EQ(v.to_doubles(), c.to_doubles());
  }
  Tensor x = random_tensor({3, 4}, DType::f32, 1);
  expect_error([&] { call("aten::unsqueeze", {x, int64_t(3)}); },
               "dim 3 out of range for a tensor of rank 3");
  expect_error([&] { call("aten::_unsafe_view", {x, std::vector<int64_t>{5, -1}}); },
               "aten::_unsafe_view: shape [5, -1] is invalid for input of size 12");
}

// ---- rsqrt, pow ------------------------------------------------------------------------------

TEST(AtenLlamaPointwise, RsqrtEveryFloatDtypeAndLayout) {
  for (DType dt : kFloatTypes) {
    for (auto [shape, layout] :
         {std::pair{Shape{37}, Layout::contiguous}, std::pair{Shape{3, 5}, Layout::transposed},
          std::pair{Shape{2, 1, 7}, Layout::strided}, std::pair{Shape{}, Layout::contiguous}}) {
      Tensor x = call_t("aten::add.Scalar", {random_tensor(shape, dt, 11, layout), 2.5});
      std::vector<double> want = x.to_doubles();
      for (double& v : want) v = 1 / std::sqrt(v);
      expect_close(call_t("aten::rsqrt", {x}), want, dt, "rsqrt");
      Tensor out = strided_out(shape, dt);
      call("aten::rsqrt.out", {x}, {{"out", out}});
      expect_close(out, want, dt, "rsqrt.out");
      expect_untouched(out, 77, "rsqrt.out");
    }
  }
  // Ints compute in f32; rsqrt(0) is inf and rsqrt(-1) NaN, as in PyTorch.
  Tensor i = from_doubles({4, 0, -1}, {3}, DType::i64);
  Tensor r = call_t("aten::rsqrt", {i});
  EXPECT_EQ(r.dtype(), DType::f32);
  EXPECT_EQ(r.to_doubles()[0], 0.5);
  EXPECT_TRUE(std::isinf(r.to_doubles()[1]));
  EXPECT_TRUE(std::isnan(r.to_doubles()[2]));
}

TEST(AtenLlamaPointwise, PowScalarEveryExponentAndDtype) {
  for (DType dt : kFloatTypes) {
    for (double e : {2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.7, 0.0, 1.0}) {
      Tensor x =
          call_t("aten::add.Scalar", {random_tensor({4, 9}, dt, 13, Layout::transposed), 2.5});
      std::vector<double> want = x.to_doubles();
      for (double& v : want) v = std::pow(v, e);
      Tensor got = call_t("aten::pow.Tensor_Scalar", {x, e});
      expect_close(got, want, dt, "pow " + std::to_string(e));
    }
  }
  // x ** 2 is exactly x * x (PyTorch's special case), bit for bit.
  Tensor x = random_tensor({101}, DType::f32, 17);
  EXPECT_EQ(call_t("aten::pow.Tensor_Scalar", {x, int64_t(2)}).to_doubles(),
            call_t("aten::mul.Tensor", {x, x}).to_doubles());
  // An int tensor with a float exponent promotes to f32.
  Tensor i = from_doubles({1, 4, 9}, {3}, DType::i32);
  Tensor r = call_t("aten::pow.Tensor_Scalar", {i, 0.5});
  EXPECT_EQ(r.dtype(), DType::f32);
  EXPECT_EQ(r.to_doubles(), (std::vector<double>{1, 2, 3}));
  expect_error([&] { call("aten::pow.Tensor_Scalar", {i, int64_t(2)}); },
               "aten::pow.Tensor_Scalar: self has dtype i32, which is not supported (expected a "
               "floating dtype, or a floating exponent (integral powers have no kernel))");
}

// ---- amax ------------------------------------------------------------------------------------

std::vector<double> ref_amax(const Tensor& x, const std::vector<bool>& reduced, const Shape& keep) {
  std::vector<double> v = x.to_doubles();
  std::vector<double> out(size_t(numel(keep)), -std::numeric_limits<double>::infinity());
  for (size_t n = 0; n < v.size(); ++n) {
    std::vector<int64_t> i = unravel(int64_t(n), x.shape());
    int64_t o = 0;
    for (size_t d = 0; d < i.size(); ++d) o = o * keep[d] + (reduced[d] ? 0 : i[d]);
    double& a = out[size_t(o)];
    if (std::isnan(v[n]) || v[n] > a) a = std::isnan(a) ? a : v[n];
  }
  return out;
}

TEST(AtenLlamaReduce, AmaxDimsKeepdimDtypes) {
  struct Case {
    std::vector<int64_t> dims;
    std::vector<bool> reduced;
  };
  const Case cases[] = {{{-1}, {false, false, true}},
                        {{0, 2}, {true, false, true}},
                        {{1}, {false, true, false}},
                        {{}, {true, true, true}}};
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64}) {
    for (const Case& c : cases) {
      for (bool keep : {false, true}) {
        Tensor x = random_tensor({3, 1, 7}, dt, 19, Layout::strided);
        Shape keep_shape = x.shape();
        Shape out_shape;
        for (size_t d = 0; d < 3; ++d) {
          if (c.reduced[d]) keep_shape[d] = 1;
          if (!c.reduced[d] || keep) out_shape.push_back(keep_shape[d]);
        }
        Tensor got = call_t("aten::amax", {x, c.dims, keep});
        ASSERT_EQ(got.shape(), out_shape);
        EXPECT_EQ(got.dtype(), dt);
        EXPECT_EQ(got.to_doubles(), ref_amax(x, c.reduced, keep_shape));  // max is exact
      }
    }
  }
  Tensor n = from_doubles({1, NAN, 3, 4, 5, 6}, {2, 3}, DType::f32);
  std::vector<double> r = call_t("aten::amax", {n, std::vector<int64_t>{1}}).to_doubles();
  EXPECT_TRUE(std::isnan(r[0]));
  EXPECT_EQ(r[1], 6);
  Tensor e = Tensor::empty({2, 0}, DType::f32);
  expect_error([&] { call("aten::amax", {e, std::vector<int64_t>{1}}); },
               "aten::amax: expected reduction dim 1 to have non-zero size");
  EXPECT_EQ(call_t("aten::amax", {e, std::vector<int64_t>{0}}).shape(), (Shape{0}));
  Tensor b = Tensor::empty({2}, DType::boolean);
  expect_error([&] { call("aten::amax", {b}); },
               "aten::amax: self has dtype bool, which is not supported");
}

// ---- rotary embedding and _to_copy -------------------------------------------------------------

TEST(AtenLlamaRotary, SliceNegCatOnNonContiguousHalves) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    // [batch, heads, seq, d] seen through a permute of [batch, seq, heads, d]: not contiguous.
    Tensor base = random_tensor({2, 5, 3, 8}, dt, 23);
    Tensor x = call_t("aten::permute", {base, std::vector<int64_t>{0, 2, 1, 3}});
    Tensor x1 = call_t("aten::slice.Tensor", {x, int64_t(-1), int64_t(0), int64_t(4)});
    Tensor x2 = call_t("aten::slice.Tensor", {x, int64_t(-1), int64_t(4), Value()});
    Tensor rot =
        call_t("aten::cat", {std::vector<Tensor>{call_t("aten::neg", {x2}), x1}, int64_t(-1)});
    Tensor cos = random_tensor({5, 8}, dt, 29), sin = random_tensor({5, 8}, dt, 31);
    Tensor y = call_t("aten::add.Tensor", {call_t("aten::mul.Tensor", {x, cos}),
                                           call_t("aten::mul.Tensor", {rot, sin})});
    ASSERT_EQ(y.shape(), (Shape{2, 3, 5, 8}));
    std::vector<double> want(size_t(y.numel()));
    for (int64_t n = 0; n < y.numel(); ++n) {
      std::vector<int64_t> i = unravel(n, y.shape());
      double xv = at(base, {i[0], i[2], i[1], i[3]});
      double r = i[3] < 4 ? -at(base, {i[0], i[2], i[1], i[3] + 4})
                          : at(base, {i[0], i[2], i[1], i[3] - 4});
      // Each product and the sum round to the dtype, as the ops do.
      double a = as_stored(xv * at(cos, {i[2], i[3]}), dt);
      double b = as_stored(r * at(sin, {i[2], i[3]}), dt);
      want[size_t(n)] = a + b;
    }
    expect_close(y, want, dt, "rotary");
  }
}

TEST(AtenLlamaCopy, ToCopyBetweenF32AndBf16) {
  Tensor x = random_tensor({3, 17}, DType::f32, 37, Layout::transposed);
  Tensor b = call_t("aten::_to_copy", {x}, {{"dtype", DType::bf16}});
  EXPECT_EQ(b.dtype(), DType::bf16);
  std::vector<double> xv = x.to_doubles(), bv = b.to_doubles();
  for (size_t i = 0; i < xv.size(); ++i) ASSERT_EQ(bv[i], double(float(BFloat16(float(xv[i])))));
  Tensor f = call_t("aten::_to_copy", {b}, {{"dtype", DType::f32}});
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_EQ(f.to_doubles(), bv);  // widening is exact
}

}  // namespace
}  // namespace symmflow::test
