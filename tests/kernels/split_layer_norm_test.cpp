// The ops with several results (Note [list returns] in symmflow/schema/schema.hpp), eagerly:
// split_with_sizes and split.Tensor (one view of self per piece, every element equal to the naive
// slice, zero-size pieces, an uneven last piece, strided inputs, the error texts of bad sizes) and
// native_layer_norm (out, mean and rstd against an f64 reference for every float dtype, with and
// without weight and bias, over one and two normalized dims, strided inputs, the error texts).
#include <cmath>
#include <limits>

#include "support/errors.hpp"
#include "test_util.hpp"

namespace symmflow::test {
namespace {

using testing::usage_error_of;

std::vector<Tensor> call_list(std::string_view op, const std::vector<Value>& args) {
  Value v = call(op, args);
  EXPECT_TRUE(v.is_tensor_list()) << op << " gave " << v.kind_name();
  return v.to_tensor_list();
}

// Every element of `piece` equals x at the same index shifted by `start` along `dim`.
void expect_piece(const Tensor& piece, const Tensor& x, int64_t dim, int64_t start, int64_t size,
                  const std::string& what) {
  Shape want = x.shape();
  want[size_t(dim)] = size;
  ASSERT_EQ(piece.shape(), want) << what;
  EXPECT_EQ(piece.dtype(), x.dtype()) << what;
  EXPECT_EQ(piece.storage(), x.storage()) << what << ": a split piece is a view of self";
  for (int64_t i = 0; i < piece.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, piece.shape());
    std::vector<int64_t> src = idx;
    src[size_t(dim)] += start;
    ASSERT_EQ(piece.item_as_double(idx), x.item_as_double(src)) << what << " element " << i;
  }
}

void expect_split(const std::vector<Tensor>& pieces, const Tensor& x, int64_t dim,
                  const std::vector<int64_t>& sizes, const std::string& what) {
  ASSERT_EQ(pieces.size(), sizes.size()) << what;
  int64_t start = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    expect_piece(pieces[i], x, dim, start, sizes[i], fmt::format("{} piece {}", what, i));
    start += sizes[i];
  }
}

TEST(AtenSplit, SplitWithSizesEqualsNaiveSlices) {
  uint32_t seed = 1;
  for (DType dt : {DType::f32, DType::bf16, DType::i64, DType::boolean}) {
    for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
      Tensor x = random_tensor({3, 5, 4}, dt, seed++, layout);
      for (int64_t dim : {0, 1, 2, -1}) {
        const int64_t d = dim < 0 ? dim + 3 : dim;
        const int64_t n = x.shape()[size_t(d)];
        for (std::vector<int64_t> sizes :
             {std::vector<int64_t>{n}, {1, n - 1}, {0, n, 0}, {n - 1, 0, 1}}) {
          std::string what = fmt::format("split_with_sizes {} {} dim {} sizes {}", dtype_name(dt),
                                         layout_name(layout), dim, shape_str(sizes));
          expect_split(call_list("aten::split_with_sizes", {x, sizes, dim}), x, d, sizes, what);
        }
      }
    }
  }
  // dim defaults to 0; a write through a piece is seen in self.
  Tensor x = random_tensor({4, 2}, DType::f32, 9);
  std::vector<Tensor> p = call_list("aten::split_with_sizes", {x, std::vector<int64_t>{1, 3}});
  expect_split(p, x, 0, {1, 3}, "split_with_sizes default dim");
  store_double(p[1].view(), 0, 42);
  EXPECT_EQ(x.item_as_double(std::vector<int64_t>{1, 0}), 42);
  // No piece at all from an empty size list over an empty dim.
  Tensor e = Tensor::empty({0, 3}, DType::f32);
  EXPECT_TRUE(call_list("aten::split_with_sizes", {e, std::vector<int64_t>{}}).empty());
}

TEST(AtenSplit, SplitTensorHasAnUnevenLastPiece) {
  uint32_t seed = 20;
  for (Layout layout : {Layout::contiguous, Layout::transposed}) {
    Tensor x = random_tensor({5, 7}, DType::f32, seed++, layout);
    struct Case {
      int64_t split_size, dim;
      std::vector<int64_t> sizes;
    };
    for (const Case& c : {Case{2, 0, {2, 2, 1}}, Case{1, 0, {1, 1, 1, 1, 1}}, Case{5, 0, {5}},
                          Case{9, 0, {5}}, Case{3, 1, {3, 3, 1}}, Case{7, -1, {7}},
                          Case{4, -1, {4, 3}}}) {
      const int64_t d = c.dim < 0 ? c.dim + 2 : c.dim;
      expect_split(call_list("aten::split.Tensor", {x, c.split_size, c.dim}), x, d, c.sizes,
                   fmt::format("split.Tensor {} size {} dim {}", layout_name(layout),
                               c.split_size, c.dim));
    }
  }
  // An empty dim gives one empty piece, split_size 0 included.
  Tensor e = Tensor::empty({2, 0}, DType::f32);
  for (int64_t size : {0, 3}) {
    expect_split(call_list("aten::split.Tensor", {e, size, int64_t(1)}), e, 1, {0},
                 fmt::format("split.Tensor of an empty dim by {}", size));
  }
  // `aten::split` resolves to split.Tensor by its int argument.
  EXPECT_EQ(call_list("aten::split", {random_tensor({6}, DType::f32, 3), int64_t(4)}).size(), 2u);
}

TEST(AtenSplit, BadSizesAreRefused) {
  Tensor x = random_tensor({2, 8}, DType::f32, 1);
  EXPECT_EQ(usage_error_of([&] { call("aten::split_with_sizes", {x, std::vector<int64_t>{2, 2}, 1}); }),
            "aten::split_with_sizes: split_with_sizes expects split_sizes to sum exactly to 8 "
            "(input tensor's size at dimension 1), but got split_sizes=[2, 2]");
  EXPECT_EQ(usage_error_of([&] { call("aten::split_with_sizes", {x, std::vector<int64_t>{10, -2}, 1}); }),
            "aten::split_with_sizes: split_with_sizes expects split_sizes have only non-negative "
            "entries, but got split_sizes=[10, -2]");
  EXPECT_EQ(usage_error_of([&] {
              call("aten::split_with_sizes",
                   {x, std::vector<int64_t>{std::numeric_limits<int64_t>::max(), 2}, 0});
            }),
            "aten::split_with_sizes: split_with_sizes expects split_sizes to sum exactly to 2 "
            "(input tensor's size at dimension 0), but got split_sizes=[9223372036854775807, 2]");
  EXPECT_EQ(usage_error_of([&] { call("aten::split.Tensor", {x, int64_t(-1), 1}); }),
            "aten::split.Tensor: split expects split_size be non-negative, but got split_size=-1");
  EXPECT_EQ(usage_error_of([&] { call("aten::split.Tensor", {x, int64_t(0), 1}); }),
            "aten::split.Tensor: split_size can only be 0 if dimension size is 0, but got "
            "dimension size of 8");
  Tensor s = random_tensor({}, DType::f32, 2);
  EXPECT_EQ(usage_error_of([&] { call("aten::split.Tensor", {s, int64_t(1)}); }),
            "aten::split.Tensor: split expects at least a 1-dimensional tensor");
  expect_error([&] { call("aten::split_with_sizes", {x, std::vector<int64_t>{8}, 2}); },
               "dim");
}

// native_layer_norm's three results in f64, over rows of `inner` elements.
struct LayerNormRef {
  std::vector<double> out, mean, rstd, scale;
};
LayerNormRef ref_layer_norm(const Tensor& x, int64_t inner, const Tensor* w, const Tensor* b,
                            double eps, size_t rows) {
  std::vector<double> v = x.to_doubles();
  std::vector<double> wv = w ? w->to_doubles() : std::vector<double>();
  std::vector<double> bv = b ? b->to_doubles() : std::vector<double>();
  LayerNormRef r;
  r.out.assign(v.size(), 0);
  r.scale.assign(v.size(), 0);
  for (size_t row = 0; row < rows; ++row) {
    if (inner == 0) {  // PyTorch's values for a row of no element
      r.mean.push_back(0);
      r.rstd.push_back(std::nan(""));
      continue;
    }
    const double* xr = v.data() + row * size_t(inner);
    double mu = 0, var = 0;
    for (int64_t j = 0; j < inner; ++j) mu += xr[j];
    mu /= double(inner);
    for (int64_t j = 0; j < inner; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var /= double(inner);
    const double rs = 1 / std::sqrt(var + eps);
    r.mean.push_back(mu);
    r.rstd.push_back(rs);
    for (int64_t j = 0; j < inner; ++j) {
      const size_t i = row * size_t(inner) + size_t(j);
      const double normed = (xr[j] - mu) * rs;
      r.out[i] = normed * (w ? wv[size_t(j)] : 1) + (b ? bv[size_t(j)] : 0);
      // The size of what was combined: the normalized value (its error grows with it) and bias.
      r.scale[i] = 2 * (std::abs(normed) + 1) * (w ? std::abs(wv[size_t(j)]) + 1 : 1) +
                   (b ? std::abs(bv[size_t(j)]) : 0);
    }
  }
  return r;
}

TEST(AtenNativeLayerNorm, AgainstADoubleReference) {
  uint32_t seed = 1;
  for (DType dt : kFloatTypes) {
    const DType stats = dt == DType::f64 ? DType::f64 : DType::f32;
    for (Shape shape : {Shape{4, 8}, Shape{2, 3, 5}, Shape{1, 1}, Shape{0, 6}, Shape{3, 131}}) {
      for (Layout layout : {Layout::contiguous, Layout::transposed}) {
        for (int affine = 0; affine < 4; ++affine) {  // weight, bias: neither, one, both
          for (int ns : {1, 2}) {
            const bool with_w = affine & 1, with_b = affine & 2;
            Shape norm(shape.end() - ns, shape.end());
            Tensor x = random_tensor(shape, dt, seed++, layout);
            Tensor w = random_tensor(norm, dt, seed++), b = random_tensor(norm, dt, seed++);
            const double eps = 1e-5;
            std::string what = fmt::format("native_layer_norm {} {} {} weight {} bias {} norm {}",
                                           dtype_name(dt), shape_str(shape), layout_name(layout),
                                           with_w, with_b, shape_str(norm));
            Value r = call("aten::native_layer_norm",
                           {x, norm, with_w ? Value(w) : Value(None{}),
                            with_b ? Value(b) : Value(None{}), eps});
            ASSERT_TRUE(r.is_tensor_list()) << what;
            const std::vector<Tensor>& got = r.to_tensor_list();
            ASSERT_EQ(got.size(), 3u) << what;
            Shape stats_shape = shape;
            for (int k = 0; k < ns; ++k) stats_shape[stats_shape.size() - 1 - size_t(k)] = 1;
            EXPECT_EQ(got[0].shape(), shape) << what;
            EXPECT_EQ(got[1].shape(), stats_shape) << what;
            EXPECT_EQ(got[2].shape(), stats_shape) << what;
            LayerNormRef ref =
                ref_layer_norm(x, numel(norm), with_w ? &w : nullptr, with_b ? &b : nullptr, eps,
                               size_t(numel(stats_shape)));
            expect_close(got[0], ref.out, dt, what + " out", ref.scale);
            // mean and rstd are accumulated in f32 (f64 for f64): the f32 tolerance, scaled by
            // the row's size (sums of `inner` terms).
            std::vector<double> stat_scale(ref.mean.size(), double(numel(norm)));
            expect_close(got[1], ref.mean, stats, what + " mean", stat_scale);
            std::vector<double> rstd_scale;
            for (double v : ref.rstd) rstd_scale.push_back(std::abs(v) * double(numel(norm)));
            expect_close(got[2], ref.rstd, stats, what + " rstd", rstd_scale);
          }
        }
      }
    }
  }
}

TEST(AtenNativeLayerNorm, MixedWeightDtypeAndAnEmptyRow) {
  // An f32 weight and bias on a bf16 input (as a bf16 model with f32 norm parameters has): out
  // stays bf16.
  Tensor x = random_tensor({3, 16}, DType::bf16, 1);
  Tensor w = random_tensor({16}, DType::f32, 2), b = random_tensor({16}, DType::f32, 3);
  std::vector<Tensor> got = call("aten::native_layer_norm", {x, std::vector<int64_t>{16}, w, b, 1e-6})
                                .to_tensor_list();
  LayerNormRef ref = ref_layer_norm(x, 16, &w, &b, 1e-6, 3);
  expect_close(got[0], ref.out, DType::bf16, "bf16 input, f32 weight", ref.scale);
  // Rows of no element: mean 0, rstd NaN (PyTorch's values).
  std::vector<Tensor> e = call("aten::native_layer_norm",
                               {Tensor::empty({2, 0}, DType::f32), std::vector<int64_t>{0}, None{},
                                None{}, 1e-5})
                              .to_tensor_list();
  EXPECT_EQ(e[1].to_doubles(), (std::vector<double>{0, 0}));
  EXPECT_TRUE(std::isnan(e[2].to_doubles()[0]));
}

TEST(AtenNativeLayerNorm, BadInputIsRefused) {
  Tensor x = random_tensor({2, 3, 4}, DType::bf16, 1);
  auto ln = [&](const Tensor& input, std::vector<int64_t> ns, Value w) {
    return usage_error_of(
        [&] { call("aten::native_layer_norm", {input, ns, w, None{}, 1e-5}); });
  };
  EXPECT_EQ(ln(x, {5}, None{}),
            "aten::native_layer_norm: given normalized_shape=[5], expected input with shape [*, "
            "5], but got input of size [2, 3, 4]");
  EXPECT_EQ(ln(x, {}, None{}),
            "aten::native_layer_norm: expected normalized_shape to be at least 1-dimensional, "
            "i.e., containing at least one element, but got normalized_shape = []");
  EXPECT_EQ(ln(x, {4}, Tensor::empty({3}, DType::bf16)),
            "aten::native_layer_norm: expected weight to be of same shape as normalized_shape, "
            "but got weight of shape [3] and normalized_shape = [4]");
  EXPECT_EQ(ln(random_tensor({2, 3}, DType::i64, 2), {3}, None{}),
            "aten::native_layer_norm: input has dtype i64, which is not supported (expected f32, "
            "f64, bf16 or f16)");
  // weight and bias are positional and required (`Tensor?` without a default, as PyTorch's).
  expect_error([&] { call("aten::native_layer_norm", {x, std::vector<int64_t>{4}}); },
               "missing argument 'weight'");
}

}  // namespace
}  // namespace symmflow::test
