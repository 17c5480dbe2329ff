// aten::sum.dim_IntList, mean.dim (+ out), rms_norm and _softmax (+ out) against f64 references:
// every dim combination of a 3-D tensor with and without keepdim, all dims, empty reductions,
// integer and bool sums (to i64), dtype=, non-contiguous inputs, half_to_float, error texts.
#include "test_util.hpp"

namespace symmflow::test {
namespace {

// Sum (or mean) over the dims marked in `mask`, in f64; `scale` gets sum |x| per output.
std::vector<double> ref_reduce(const Tensor& x, const std::vector<bool>& mask, bool mean,
                               std::vector<double>* scale) {
  Shape keep = x.shape();
  for (size_t d = 0; d < keep.size(); ++d) {
    if (mask[d]) keep[d] = 1;
  }
  std::vector<double> v = x.to_doubles(), out(size_t(numel(keep)), 0);
  scale->assign(out.size(), 0);
  std::vector<int64_t> count(out.size(), 0);
  for (int64_t n = 0; n < x.numel(); ++n) {
    std::vector<int64_t> idx = unravel(n, x.shape());
    int64_t o = broadcast_index(idx, keep);
    out[size_t(o)] += v[size_t(n)];
    (*scale)[size_t(o)] += std::abs(v[size_t(n)]);
    ++count[size_t(o)];
  }
  if (mean) {
    int64_t c = 1;
    for (size_t d = 0; d < mask.size(); ++d) c *= mask[d] ? x.shape()[d] : 1;
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = c == 0 ? NAN : out[i] / double(c);
      (*scale)[i] = c == 0 ? 0 : (*scale)[i] / double(c);
    }
  }
  return out;
}

Shape reduced_shape(const Shape& s, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < s.size(); ++d) {
    if (!mask[d]) out.push_back(s[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

TEST(AtenSum, EveryDimSetDtypeAndLayout) {
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {0}, {1}, {-1}, {0, 2}, {2, 1}, {0, 1, 2}};
  for (DType dt : kAllDTypes) {
    DType rd = is_floating(dt) ? dt : DType::i64;
    uint32_t seed = 1;
    for (Shape shape : {Shape{3, 4, 5}, Shape{2, 0, 3}, Shape{1, 1, 1}, Shape{5, 3, 67}}) {
      for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
        Tensor x = random_tensor(shape, dt, seed++, layout);
        for (const auto& dims : dim_sets) {
          for (bool keepdim : {false, true}) {
            std::vector<bool> mask(3, dims.empty());
            for (int64_t d : dims) mask[size_t((d + 3) % 3)] = true;
            std::string what = fmt::format("sum {} {} {} dims [{}] keepdim {}", dtype_name(dt),
                                           shape_str(shape), layout_name(layout),
                                           fmt::join(dims, ","), keepdim);
            Tensor got = call_t("aten::sum.dim_IntList", {x, dims, keepdim});
            ASSERT_EQ(got.shape(), reduced_shape(shape, mask, keepdim)) << what;
            std::vector<double> scale;
            std::vector<double> want = ref_reduce(x, mask, false, &scale);
            expect_close(got, want, rd, what, scale);
            if (is_floating(dt)) {
              Tensor m = call_t("aten::mean.dim", {x, dims, keepdim});
              expect_close(m, ref_reduce(x, mask, true, &scale), dt, "mean " + what, scale);
            }
          }
        }
      }
    }
  }
}

TEST(AtenSum, ZeroDimNoneDimAndDtype) {
  Tensor s = random_tensor({}, DType::f32, 1);
  EXPECT_EQ(call_t("aten::sum.dim_IntList", {s, None{}}).to_doubles(), s.to_doubles());
  Tensor x = random_tensor({4, 6}, DType::i32, 2);
  Tensor f = call_t("aten::sum.dim_IntList", {x, std::vector<int64_t>{1}}, {{"dtype", DType::f64}});
  std::vector<double> scale;
  expect_close(f, ref_reduce(x, {false, true}, false, &scale), DType::f64, "sum dtype=f64", scale);
  Tensor bools = random_tensor({9}, DType::boolean, 3);
  Tensor count = call_t("aten::sum.dim_IntList", {bools, None{}});
  EXPECT_EQ(count.dtype(), DType::i64);
  expect_close(count, ref_reduce(bools, {true}, false, &scale), DType::i64, "sum bool", scale);
  Tensor mean_int = call_t("aten::mean.dim", {x, None{}}, {{"dtype", DType::f32}});
  expect_close(mean_int, ref_reduce(x, {true, true}, true, &scale), DType::f32, "mean i32 dtype=f32",
               scale);
  Tensor empty = Tensor::empty({0, 3}, DType::f32);
  EXPECT_EQ(call_t("aten::sum.dim_IntList", {empty, None{}}).to_doubles(), std::vector<double>{0});
  EXPECT_TRUE(std::isnan(call_t("aten::mean.dim", {empty, None{}}).to_doubles()[0]));
}

// Integer sums accumulate in int64, exactly: past 2^53, where a double would round, and i32 / bool
// inputs promote to i64 (PyTorch's sum dtype).
TEST(AtenSum, IntegerSumsAreExact) {
  const int64_t big = (int64_t(1) << 53) + 1;
  Tensor x = Tensor::from_vector<int64_t>({big, 1, 1, -big, 2, 3}, {2, 3});
  Tensor rows = call_t("aten::sum.dim_IntList", {x, std::vector<int64_t>{1}});
  EXPECT_EQ(rows.data<int64_t>()[0], big + 2);
  EXPECT_EQ(rows.data<int64_t>()[1], -big + 5);
  Tensor i32 = Tensor::from_vector<int32_t>({2147483647, 2147483647, 1}, {3});
  Tensor s = call_t("aten::sum.dim_IntList", {i32, std::vector<int64_t>{0}});
  EXPECT_EQ(s.dtype(), DType::i64);
  EXPECT_EQ(s.data<int64_t>()[0], int64_t(2147483647) * 2 + 1);  // no i32 overflow
  Tensor b = Tensor::from_vector<bool>({true, false, true, true}, {2, 2});
  Tensor cols = call_t("aten::sum.dim_IntList", {b, std::vector<int64_t>{0}, true});
  EXPECT_EQ(cols.dtype(), DType::i64);
  EXPECT_EQ(cols.shape(), (Shape{1, 2}));
  EXPECT_EQ(cols.to_doubles(), (std::vector<double>{2, 1}));
}

TEST(AtenSum, OutVariants) {
  Tensor x = random_tensor({3, 8}, DType::bf16, 4, Layout::transposed);
  Tensor out = strided_out({3}, DType::bf16);
  EXPECT_TRUE(call("aten::sum.IntList_out", {x, std::vector<int64_t>{1}}, {{"out", out}}).is_none());
  std::vector<double> scale;
  expect_close(out, ref_reduce(x, {false, true}, false, &scale), DType::bf16, "sum out", scale);
  expect_untouched(out, 77, "sum out");
  Tensor mout = strided_out({1, 8}, DType::bf16);
  call("aten::mean.out", {x, std::vector<int64_t>{0}, true}, {{"out", mout}});
  expect_close(mout, ref_reduce(x, {true, false}, true, &scale), DType::bf16, "mean out", scale);
  expect_untouched(mout, 77, "mean out");
}

TEST(AtenSum, Errors) {
  Tensor x = random_tensor({2, 3}, DType::f32, 1);
  expect_error([&] { call("aten::sum.dim_IntList", {x, std::vector<int64_t>{5}}); },
               "dim 5 out of range for a tensor of rank 2");
  expect_error([&] { call("aten::sum.dim_IntList", {x, std::vector<int64_t>{1, -1}}); },
               "aten::sum.dim_IntList: dim 1 appears multiple times in the list of dims");
  expect_error([&] { call("aten::mean.dim", {random_tensor({2}, DType::i32, 2), None{}}); },
               "aten::mean.dim: could not infer output dtype; self has dtype i32");
  expect_error([&] { call("aten::sum.IntList_out", {x, None{}}, {{"out", Tensor::empty({2}, DType::f32)}}); },
               "aten::sum.IntList_out: out has shape [2] but the result has shape []");
}

// rms_norm over the last `inner` elements of each row.
std::vector<double> ref_rms_norm(const Tensor& x, int64_t inner, const Tensor* w, double eps,
                                 std::vector<double>* scale) {
  std::vector<double> v = x.to_doubles(), out(v.size());
  std::vector<double> wv = w ? w->to_doubles() : std::vector<double>();
  scale->assign(v.size(), 0);
  for (size_t r = 0; inner > 0 && r < v.size() / size_t(inner); ++r) {
    double ss = 0;
    for (int64_t j = 0; j < inner; ++j) ss += v[r * size_t(inner) + size_t(j)] * v[r * size_t(inner) + size_t(j)];
    double k = 1 / std::sqrt(ss / double(inner) + eps);
    for (int64_t j = 0; j < inner; ++j) {
      size_t i = r * size_t(inner) + size_t(j);
      out[i] = v[i] * k * (w ? wv[size_t(j)] : 1);
      (*scale)[i] = std::abs(out[i]) * 2;
    }
  }
  return out;
}

TEST(AtenRmsNorm, ShapesWeightsEpsAndLayouts) {
  for (DType dt : kFloatTypes) {
    uint32_t seed = 1;
    for (Shape shape : {Shape{4, 8}, Shape{2, 3, 5}, Shape{1, 1}, Shape{0, 6}, Shape{3, 131}}) {
      for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
        for (bool with_weight : {false, true}) {
          for (int ns : {1, 2}) {
            Shape norm(shape.end() - ns, shape.end());
            Tensor x = random_tensor(shape, dt, seed++, layout);
            Tensor w = random_tensor(norm, dt, seed++);
            double eps = ns == 1 ? 1e-5 : (dt == DType::f64 ? 2.220446049250313e-16 : 1.1920928955078125e-07);
            Value eps_v = ns == 1 ? Value(1e-5) : Value(None{});
            std::string what = fmt::format("rms_norm {} {} {} weight {} norm {}", dtype_name(dt),
                                           shape_str(shape), layout_name(layout), with_weight,
                                           shape_str(norm));
            Tensor got = call_t("aten::rms_norm", {x, norm, with_weight ? Value(w) : Value(None{}), eps_v});
            std::vector<double> scale;
            expect_close(got, ref_rms_norm(x, numel(norm), with_weight ? &w : nullptr, eps, &scale),
                         dt, what, scale);
          }
        }
      }
    }
  }
}

TEST(AtenRmsNorm, PromotesWithWeightAndErrors) {
  Tensor x = random_tensor({3, 4}, DType::bf16, 1);
  Tensor w = random_tensor({4}, DType::f32, 2);
  Tensor got = call_t("aten::rms_norm", {x, std::vector<int64_t>{4}, w, 1e-6});
  std::vector<double> scale;
  expect_close(got, ref_rms_norm(x, 4, &w, 1e-6, &scale), DType::f32, "rms_norm bf16 x f32", scale);
  expect_error([&] { call("aten::rms_norm", {x, std::vector<int64_t>{3}}); },
               "aten::rms_norm: normalized_shape [3] does not match the last dimensions of input "
               "with shape [3, 4]");
  expect_error([&] { call("aten::rms_norm", {x, std::vector<int64_t>{4}, random_tensor({3}, DType::f32, 3)}); },
               "aten::rms_norm: weight has shape [3] but normalized_shape is [4]");
  expect_error([&] { call("aten::rms_norm", {random_tensor({2}, DType::i32, 4), std::vector<int64_t>{2}}); },
               "aten::rms_norm: input has dtype i32, which is not supported");
}

std::vector<double> ref_softmax(const Tensor& x, int64_t dim) {
  std::vector<double> v = x.to_doubles(), out(v.size());
  const Shape& s = x.shape();
  int64_t n = s.empty() ? 1 : s[size_t(dim)], inner = 1;
  for (size_t d = size_t(dim) + 1; d < s.size(); ++d) inner *= s[d];
  for (size_t base = 0; base < v.size(); ++base) {
    int64_t i = int64_t(base) / inner % n;
    if (i != 0) continue;  // base is the first element of its softmax column
    double mx = -INFINITY, sum = 0;
    for (int64_t k = 0; k < n; ++k) mx = std::max(mx, v[base + size_t(k * inner)]);
    for (int64_t k = 0; k < n; ++k) sum += std::exp(v[base + size_t(k * inner)] - mx);
    for (int64_t k = 0; k < n; ++k) out[base + size_t(k * inner)] = std::exp(v[base + size_t(k * inner)] - mx) / sum;
  }
  return out;
}

TEST(AtenSoftmax, EveryDimDtypeAndLayout) {
  for (DType dt : kFloatTypes) {
    uint32_t seed = 1;
    for (Shape shape : {Shape{3, 4, 5}, Shape{1, 1, 1}, Shape{2, 0, 3}, Shape{2, 3, 67}}) {
      for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
        Tensor x = random_tensor(shape, dt, seed++, layout);
        for (int64_t dim : {0, 1, 2, -1}) {
          int64_t d = (dim + 3) % 3;
          std::string what = fmt::format("softmax {} {} {} dim {}", dtype_name(dt), shape_str(shape),
                                         layout_name(layout), dim);
          expect_close(call_t("aten::_softmax", {x, dim, false}), ref_softmax(x, d), dt, what);
        }
      }
    }
  }
  Tensor s = random_tensor({}, DType::f32, 9);
  EXPECT_EQ(call_t("aten::_softmax", {s, int64_t(0), false}).to_doubles(), std::vector<double>{1});
}

TEST(AtenSoftmax, HalfToFloatOutAndErrors) {
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor x = random_tensor({4, 9}, dt, 1, Layout::transposed);
    Tensor got = call_t("aten::_softmax", {x, int64_t(1), true});
    expect_close(got, ref_softmax(x, 1), DType::f32, "softmax half_to_float");
  }
  Tensor x = random_tensor({4, 9}, DType::f32, 2);
  Tensor out = strided_out({4, 9}, DType::f32);
  EXPECT_TRUE(call("aten::_softmax.out", {x, int64_t(0), false}, {{"out", out}}).is_none());
  expect_close(out, ref_softmax(x, 0), DType::f32, "softmax out");
  expect_untouched(out, 77, "softmax out");
  expect_error([&] { call("aten::_softmax", {x, int64_t(0), true}); },
               "aten::_softmax: half_to_float is only supported for f16 and bf16 inputs, not f32");
  expect_error([&] { call("aten::_softmax", {x, int64_t(2), false}); },
               "dim 2 out of range for a tensor of rank 2");
  expect_error([&] { call("aten::_softmax", {random_tensor({3}, DType::i64, 3), int64_t(0), false}); },
               "aten::_softmax: self has dtype i64, which is not supported");
}

}  // namespace
}  // namespace symmflow::test
