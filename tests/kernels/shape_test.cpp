// aten views (view, reshape, slice.Tensor, t, transpose.int share storage; reshape copies when it
// must), cat (+ out), clone / _to_copy / copy_ and the factories, for every dtype, with the error
// texts of bad inputs (incompatible view strides, bad dims, mismatched cat inputs, bad sizes).
#include <limits>

#include "test_util.hpp"

namespace symmflow::test {
namespace {

// Element at a multi-index, through core only.
double at(const Tensor& t, std::vector<int64_t> idx) { return t.item_as_double(idx); }

void expect_shares(const Tensor& view, const Tensor& base, const std::string& what) {
  EXPECT_EQ(view.storage(), base.storage()) << what;
}

TEST(AtenViews, ViewSharesStorageForEveryDtype) {
  for (DType dt : kAllDTypes) {
    Tensor x = random_tensor({2, 3, 4}, dt, 1);
    Tensor v = call_t("aten::view", {x, std::vector<int64_t>{6, -1}});
    ASSERT_EQ(v.shape(), (Shape{6, 4}));
    expect_shares(v, x, "view");
    EXPECT_EQ(v.raw_data(), x.raw_data());
    EXPECT_EQ(v.to_doubles(), x.to_doubles());
    // A write through the view is visible in the base.
    store_double(v.view(), 5, 1);
    EXPECT_EQ(at(x, {0, 1, 1}), 1);
  }
  // A transposed tensor can merge only dims that stay contiguous.
  Tensor t = random_tensor({4, 6}, DType::f32, 2, Layout::transposed);
  Tensor split = call_t("aten::view", {t, std::vector<int64_t>{2, 2, 6}});
  EXPECT_EQ(split.strides(), (Strides{2, 1, 4}));
  EXPECT_EQ(split.to_doubles(), t.to_doubles());
  Tensor e = Tensor::empty({0, 3}, DType::f32);
  EXPECT_EQ(call_t("aten::view", {e, std::vector<int64_t>{3, 0}}).shape(), (Shape{3, 0}));
  Tensor s = random_tensor({}, DType::f32, 3);
  EXPECT_EQ(call_t("aten::view", {s, std::vector<int64_t>{1, 1}}).shape(), (Shape{1, 1}));
}

TEST(AtenViews, ViewErrors) {
  Tensor t = random_tensor({4, 6}, DType::f32, 1, Layout::transposed);
  expect_error([&] { call("aten::view", {t, std::vector<int64_t>{24}}); },
               "aten::view: view size [24] is not compatible with input tensor's size [4, 6] and "
               "stride [1, 4] (at least one dimension spans across two contiguous subspaces); use "
               "reshape instead");
  Tensor x = random_tensor({2, 3}, DType::f32, 2);
  expect_error([&] { call("aten::view", {x, std::vector<int64_t>{4, -1}}); },
               "aten::view: shape [4, -1] is invalid for input of size 6");
  expect_error([&] { call("aten::view", {x, std::vector<int64_t>{-1, -1}}); },
               "aten::view: only one dimension can be inferred");
}

TEST(AtenViews, ReshapeViewsWhenItCanAndCopiesOtherwise) {
  for (DType dt : kAllDTypes) {
    Tensor x = random_tensor({3, 4}, dt, 1);
    Tensor r = call_t("aten::reshape", {x, std::vector<int64_t>{2, 6}});
    expect_shares(r, x, "reshape contiguous");
    Tensor t = random_tensor({3, 4}, dt, 2, Layout::transposed);
    Tensor c = call_t("aten::reshape", {t, std::vector<int64_t>{-1}});
    EXPECT_NE(c.storage(), t.storage());
    EXPECT_TRUE(c.is_contiguous());
    EXPECT_EQ(c.to_doubles(), t.to_doubles());
  }
}

TEST(AtenViews, SliceTransposeAndT) {
  Tensor x = random_tensor({5, 7}, DType::f64, 1);
  struct Case {
    int64_t dim;
    Value start, end;
    int64_t step;
    int64_t b, e;  // the expected clamped range
  };
  const Case cases[] = {{1, int64_t(1), int64_t(5), 1, 1, 5}, {1, None{}, None{}, 3, 0, 7},
                        {0, int64_t(-2), None{}, 1, 3, 5},     {1, int64_t(4), int64_t(2), 1, 4, 4},
                        {-1, int64_t(-100), int64_t(100), 2, 0, 7}, {0, int64_t(5), None{}, 1, 5, 5},
                        // steps past the size select one element and overflow nothing (ir_fuzz)
                        {1, int64_t(2), None{}, std::numeric_limits<int64_t>::max(), 2, 7},
                        {0, None{}, int64_t(8), 1000, 0, 5}};
  for (const Case& c : cases) {
    Tensor s = call_t("aten::slice.Tensor", {x, c.dim, c.start, c.end, c.step});
    expect_shares(s, x, "slice");
    int64_t d = (c.dim + 2) % 2;
    int64_t len = c.e == c.b ? 0 : 1 + (c.e - c.b - 1) / c.step;
    ASSERT_EQ(s.size(d), len);
    for (int64_t i = 0; i < s.size(0); ++i) {
      for (int64_t j = 0; j < s.size(1); ++j) {
        int64_t si = d == 0 ? c.b + i * c.step : i, sj = d == 1 ? c.b + j * c.step : j;
        ASSERT_EQ(at(s, {i, j}), at(x, {si, sj}));
      }
    }
  }
  Tensor y = random_tensor({2, 3, 4}, DType::bf16, 2);
  Tensor tr = call_t("aten::transpose.int", {y, int64_t(0), int64_t(-1)});
  expect_shares(tr, y, "transpose");
  ASSERT_EQ(tr.shape(), (Shape{4, 3, 2}));
  for (int64_t i = 0; i < 24; ++i) {
    std::vector<int64_t> idx = unravel(i, {2, 3, 4});
    EXPECT_EQ(at(tr, {idx[2], idx[1], idx[0]}), at(y, idx));
  }
  Tensor m = random_tensor({3, 5}, DType::i32, 3);
  Tensor mt = call_t("aten::t", {m});
  expect_shares(mt, m, "t");
  EXPECT_EQ(mt.shape(), (Shape{5, 3}));
  EXPECT_EQ(at(mt, {4, 1}), at(m, {1, 4}));
  Tensor v = random_tensor({4}, DType::i32, 4);
  EXPECT_EQ(call_t("aten::t", {v}).shape(), (Shape{4}));
  expect_error([&] { call("aten::t", {y}); },
               "aten::t: t() expects a tensor with <= 2 dimensions, but self is 3-D");
  expect_error([&] { call("aten::transpose.int", {y, int64_t(0), int64_t(3)}); },
               "dim1 3 out of range for a tensor of rank 3");
  expect_error([&] { call("aten::slice.Tensor", {x, int64_t(0), None{}, None{}, int64_t(0)}); },
               "aten::slice.Tensor: slice step must be positive, got 0");
  expect_error([&] { call("aten::slice.Tensor", {random_tensor({}, DType::f32, 5)}); },
               "aten::slice.Tensor: slice cannot be applied to a 0-dim tensor");
}

TEST(AtenCat, EveryDtypeDimAndLayout) {
  for (DType dt : kAllDTypes) {
    for (int64_t dim : {0, 1, -1}) {
      int64_t d = (dim + 2) % 2;
      Shape sa = {3, 4}, sb = {3, 4}, sc = {3, 4};
      sb[size_t(d)] = 1;
      sc[size_t(d)] = 0;
      Tensor a = random_tensor(sa, dt, 1, Layout::transposed);
      Tensor b = random_tensor(sb, dt, 2, Layout::strided);
      Tensor c = random_tensor(sc, dt, 3);
      Tensor legacy = Tensor::empty({0}, dt);
      Tensor got = call_t("aten::cat", {std::vector<Tensor>{a, legacy, b, c}, dim});
      Shape want_shape = sa;
      want_shape[size_t(d)] += sb[size_t(d)];
      ASSERT_EQ(got.shape(), want_shape);
      for (int64_t i = 0; i < got.numel(); ++i) {
        std::vector<int64_t> idx = unravel(i, want_shape);
        double want = idx[size_t(d)] < sa[size_t(d)]
                          ? at(a, idx)
                          : (idx[size_t(d)] -= sa[size_t(d)], at(b, idx));
        ASSERT_EQ(got.to_doubles()[size_t(i)], want) << dtype_name(dt) << " dim " << dim;
      }
    }
  }
}

TEST(AtenCat, PromotesOutAndErrors) {
  Tensor a = random_tensor({2}, DType::i32, 1);
  Tensor b = random_tensor({3}, DType::f16, 2);
  Tensor got = call_t("aten::cat", {std::vector<Tensor>{a, b}});
  EXPECT_EQ(got.dtype(), DType::f16);
  std::vector<double> want = a.to_doubles(), bv = b.to_doubles();
  want.insert(want.end(), bv.begin(), bv.end());
  expect_close(got, want, DType::f16, "cat promote");
  Tensor out = strided_out({5}, DType::f32);
  EXPECT_TRUE(call("aten::cat.out", {std::vector<Tensor>{a, b}}, {{"out", out}}).is_none());
  expect_close(out, want, DType::f32, "cat.out");
  expect_untouched(out, 77, "cat.out");
  Tensor m = random_tensor({2, 3}, DType::f32, 3);
  expect_error([&] { call("aten::cat", {std::vector<Tensor>{m, random_tensor({2, 4}, DType::f32, 4)}}); },
               "aten::cat: tensors[1] has shape [2, 4] but tensors[0] has shape [2, 3]; sizes must "
               "match except in dimension 0");
  expect_error([&] { call("aten::cat", {std::vector<Tensor>{}}); },
               "aten::cat: expected a non-empty list of tensors");
  expect_error([&] { call("aten::cat", {std::vector<Tensor>{m, m}, int64_t(2)}); },
               "dim 2 out of range for a tensor of rank 2");
  expect_error([&] { call("aten::cat", {std::vector<Tensor>{m, random_tensor({}, DType::f32, 5)}}); },
               "aten::cat: zero-dimensional tensor (at position 1) cannot be concatenated");
  expect_error([&] { call("aten::cat.out", {std::vector<Tensor>{m, m}}, {{"out", Tensor::empty({4, 4}, DType::f32)}}); },
               "aten::cat.out: out has shape [4, 4] but the result has shape [4, 3]");
}

TEST(AtenCopy, CloneToCopyAndCopyInto) {
  for (DType from : kAllDTypes) {
    Tensor x = random_tensor({3, 5}, from, 1, Layout::transposed);
    Tensor c = call_t("aten::clone", {x});
    EXPECT_NE(c.storage(), x.storage());
    EXPECT_TRUE(c.is_contiguous());
    EXPECT_EQ(c.to_doubles(), x.to_doubles());
    for (DType to : kAllDTypes) {
      Tensor y = call_t("aten::_to_copy", {x}, {{"dtype", to}});
      ASSERT_EQ(y.dtype(), to);
      expect_close(y, x.to_doubles(), to, fmt::format("_to_copy {} -> {}", dtype_name(from), dtype_name(to)));
      Tensor dst = strided_out({2, 3, 5}, to);
      EXPECT_TRUE(call("aten::copy_", {dst, x}).is_none());  // broadcast over the leading dim
      std::vector<double> want = x.to_doubles();
      want.insert(want.end(), want.begin(), want.end());
      expect_close(dst, want, to, fmt::format("copy_ {} -> {}", dtype_name(from), dtype_name(to)));
      expect_untouched(dst, 77, "copy_");
    }
  }
}

TEST(AtenCopy, OverlappingCopyAndErrors) {
  Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4}, {5});
  Tensor head = x.as_strided({4}, {1}, 0), tail = x.as_strided({4}, {1}, 1);
  call("aten::copy_", {tail, head});  // shift right by one
  EXPECT_EQ(x.to_doubles(), (std::vector<double>{0, 0, 1, 2, 3}));
  expect_error([&] { call("aten::copy_", {Tensor::empty({2, 3}, DType::f32), Tensor::empty({3, 2}, DType::f32)}); },
               "aten::copy_: src with shape [3, 2] cannot be broadcast to self with shape [2, 3]");
}

TEST(AtenFactories, EmptyZerosFull) {
  for (DType dt : kAllDTypes) {
    Tensor e = call_t("aten::empty.memory_format", {std::vector<int64_t>{2, 3}}, {{"dtype", dt}});
    EXPECT_EQ(e.shape(), (Shape{2, 3}));
    EXPECT_EQ(e.dtype(), dt);
    Tensor z = call_t("aten::zeros", {std::vector<int64_t>{3, 0}}, {{"dtype", dt}});
    EXPECT_EQ(z.shape(), (Shape{3, 0}));
    Tensor z2 = call_t("aten::zeros", {std::vector<int64_t>{4}}, {{"dtype", dt}});
    EXPECT_EQ(z2.to_doubles(), std::vector<double>(4, 0));
    Tensor f = call_t("aten::full", {std::vector<int64_t>{2, 2}, int64_t(1)}, {{"dtype", dt}});
    EXPECT_EQ(f.to_doubles(), std::vector<double>(4, 1));
    Tensor out = strided_out({3}, dt);
    EXPECT_TRUE(call("aten::full.out", {std::vector<int64_t>{3}, true}, {{"out", out}}).is_none());
    EXPECT_EQ(out.to_doubles(), std::vector<double>(3, 1));
    expect_untouched(out, 77, "full.out");
    call("aten::zeros.out", {std::vector<int64_t>{3}}, {{"out", out}});
    EXPECT_EQ(out.to_doubles(), std::vector<double>(3, 0));
    expect_untouched(out, 77, "zeros.out");
  }
  EXPECT_EQ(call_t("aten::empty.memory_format", {std::vector<int64_t>{1}}).dtype(), DType::f32);
  EXPECT_EQ(call_t("aten::full", {std::vector<int64_t>{1}, 2.5}).dtype(), DType::f32);
  EXPECT_EQ(call_t("aten::full", {std::vector<int64_t>{1}, int64_t(2)}).dtype(), DType::i64);
  EXPECT_EQ(call_t("aten::full", {std::vector<int64_t>{1}, true}).dtype(), DType::boolean);
  EXPECT_EQ(call_t("aten::full", {std::vector<int64_t>{}, -0.5}).to_doubles(), std::vector<double>{-0.5});
  expect_error([&] { call("aten::zeros", {std::vector<int64_t>{2, -1}}); },
               "aten::zeros: negative dimension -1 in size [2, -1]");
  expect_error([&] { call("aten::full.out", {std::vector<int64_t>{2}, 1.0}, {{"out", Tensor::empty({3}, DType::f32)}}); },
               "aten::full.out: out has shape [3] but the result has shape [2]");
}

}  // namespace
}  // namespace symmflow::test
