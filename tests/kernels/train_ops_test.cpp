// The aten ops that training graphs add (ops/aten/meta_scatter.hpp, _log_softmax) on the CPU,
// against naive references on every element: squeeze.dims (a view: same storage, kept strides),
// constant_pad_nd (positive, negative and zero pads, the label-shift pad of transformers' loss,
// empty results), scatter.value (every dim, i32 and i64 indices, repeated indices, empty and 0-dim
// index), slice_scatter (steps, open ends, negative starts, a converting src) and _log_softmax
// (inner and outer dims, half_to_float, out variant), clamp (NaN, one bound, crossed bounds,
// promotion) and rsub.Scalar (alpha, promotion); every dtype the ops take, strided and
// transposed inputs, self never written; the error texts of bad input, as PyTorch words them.
#include <cmath>
#include <limits>

#include "support/errors.hpp"
#include "test_util.hpp"

namespace symmflow::test {
namespace {

using testing::usage_error_of;

const Layout kLayouts[] = {Layout::contiguous, Layout::transposed, Layout::strided};
const DType kPadTypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64,
                           DType::i64, DType::i32,  DType::i8,  DType::boolean};

Tensor longs(const Shape& shape, const std::vector<int64_t>& v, DType dt = DType::i64) {
  Tensor t = Tensor::empty(shape, dt);
  for (size_t i = 0; i < v.size(); ++i) store_double(t.view(), int64_t(i), double(v[i]));
  return t;
}

// Row-major linear index of `idx` in `shape`.
int64_t linear(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t l = 0;
  for (size_t d = 0; d < shape.size(); ++d) l = l * shape[d] + idx[d];
  return l;
}

// ---- squeeze.dims -------------------------------------------------------------------------------

TEST(AtenTrainOps, SqueezeDimsIsAViewWithoutTheListedUnitDims) {
  struct Case {
    Shape shape;
    std::vector<int64_t> dims;
    Shape want;
  };
  const Case cases[] = {{{1, 3, 1, 2}, {0, 2}, {3, 2}},
                        {{1, 3, 1, 2}, {-2}, {1, 3, 2}},
                        {{1, 3, 1, 2}, {1, 3}, {1, 3, 1, 2}},  // not of size 1: kept
                        {{1, 3, 1, 2}, {}, {1, 3, 1, 2}},
                        {{4, 1}, {1, 0}, {4}},
                        {{1}, {0}, {}},
                        {{}, {0}, {}},
                        {{}, {-1}, {}}};
  for (const Case& c : cases) {
    for (Layout layout : kLayouts) {
      Tensor x = random_tensor(c.shape, DType::f32, 3, layout);
      Tensor y = call_t("aten::squeeze.dims", {x, Value(c.dims)});
      const std::string what = fmt::format("squeeze {} dims {} {}", shape_str(c.shape),
                                           shape_str(c.dims), layout_name(layout));
      ASSERT_EQ(y.shape(), c.want) << what;
      EXPECT_EQ(y.raw_data(), x.raw_data()) << what << ": a view of self";
      Strides want_strides;
      for (size_t d = 0; d < c.shape.size(); ++d) {
        bool dropped = false;
        for (int64_t k : c.dims) dropped |= (k < 0 ? k + int64_t(c.shape.size()) : k) == int64_t(d);
        if (!(dropped && c.shape[d] == 1)) want_strides.push_back(x.strides()[d]);
      }
      EXPECT_EQ(y.strides(), want_strides) << what;
      EXPECT_EQ(y.to_doubles(), x.to_doubles()) << what;
    }
  }
  Tensor x = random_tensor({1, 3}, DType::f32, 1);
  EXPECT_EQ(usage_error_of([&] { call("aten::squeeze.dims", {x, Value({0, -2})}); }),
            "aten::squeeze.dims: dim 0 appears multiple times in the list of dims");
  EXPECT_NE(usage_error_of([&] { call("aten::squeeze.dims", {x, Value({2})}); })
                .find("dim 2 out of range for a tensor of rank 2"),
            std::string::npos);
}

// ---- constant_pad_nd ----------------------------------------------------------------------------

// out[o] = self[o - before] where that lies inside self along every padded dim, else value.
std::vector<double> ref_pad(const Tensor& self, const std::vector<int64_t>& pad, double value,
                            Shape* out_shape) {
  const Shape& s = self.shape();
  const size_t n = s.size(), l_pad = pad.size() / 2;
  std::vector<int64_t> before(n, 0);
  Shape shape = s;
  for (size_t k = 0; k < l_pad; ++k) {
    const size_t d = n - 1 - k;
    before[d] = pad[2 * k];
    shape[d] = s[d] + pad[2 * k] + pad[2 * k + 1];
  }
  *out_shape = shape;
  std::vector<double> src = self.to_doubles(), out(size_t(numel(shape)));
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<int64_t> idx = unravel(int64_t(i), shape);
    bool inside = true;
    for (size_t d = 0; d < n; ++d) {
      idx[d] -= before[d];
      inside = inside && idx[d] >= 0 && idx[d] < s[d];
    }
    out[i] = inside ? src[size_t(linear(idx, s))] : value;
  }
  return out;
}

TEST(AtenTrainOps, ConstantPadNdMatchesReference) {
  struct Case {
    Shape shape;
    std::vector<int64_t> pad;
  };
  const Case cases[] = {{{2, 7}, {0, 1}},          // transformers' label shift: pad(labels, (0, 1))
                        {{3, 5}, {1, 2}},          {{3, 5}, {-1, 2}},
                        {{3, 5}, {2, -3}},         {{3, 5}, {-2, -3}},  // crops only
                        {{3, 5}, {1, 1, 2, 0}},    {{2, 3, 4}, {0, 0, -1, 2, 1, 0}},
                        {{3, 5}, {}},              {{3, 5}, {0, 0}},
                        {{3, 5}, {-5, 0}},         // nothing of self left
                        {{0, 5}, {1, 1}},          {{3, 0}, {2, 1}},    {{4}, {-4, 3}}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    for (DType dt : kPadTypes) {
      for (Layout layout : kLayouts) {
        if (layout == Layout::transposed && c.shape.size() < 2) continue;
        Tensor x = random_tensor(c.shape, dt, seed++, layout);
        std::vector<double> before = x.to_doubles();
        const double value = dt == DType::boolean ? 1 : is_floating(dt) ? 0.5 : -100;
        Value v = is_floating(dt) ? Value(value) : Value(int64_t(value));
        Shape shape;
        std::vector<double> want = ref_pad(x, c.pad, value, &shape);
        Tensor y = call_t("aten::constant_pad_nd", {x, Value(c.pad), v});
        const std::string what = fmt::format("pad {} by {} {} {}", shape_str(c.shape),
                                             shape_str(c.pad), dtype_name(dt), layout_name(layout));
        ASSERT_EQ(y.shape(), shape) << what;
        expect_close(y, want, dt, what);
        EXPECT_EQ(x.to_doubles(), before) << what << ": self is not written";
      }
    }
  }
  // The default value is 0.
  Tensor x = random_tensor({2, 2}, DType::f32, 9);
  Shape shape;
  expect_close(call_t("aten::constant_pad_nd", {x, Value({1, 1})}), ref_pad(x, {1, 1}, 0, &shape),
               DType::f32, "pad default value");
}

TEST(AtenTrainOps, ConstantPadNdErrors) {
  Tensor x = random_tensor({3}, DType::f32, 1);
  EXPECT_EQ(usage_error_of([&] { call("aten::constant_pad_nd", {x, Value({1})}); }),
            "aten::constant_pad_nd: Length of pad must be even but instead it equals 1");
  EXPECT_EQ(usage_error_of([&] { call("aten::constant_pad_nd", {x, Value({1, 1, 1, 1})}); }),
            "aten::constant_pad_nd: Length of pad should be no more than twice the number of "
            "dimensions of the input. Pad length is 4 while the input has 1 dimensions.");
  EXPECT_EQ(usage_error_of([&] { call("aten::constant_pad_nd", {x, Value({-4, 5})}); }),
            "aten::constant_pad_nd: narrow(): length must be non-negative (padding -4 and 5 of "
            "dimension 0 of size 3)");
  EXPECT_EQ(usage_error_of([&] { call("aten::constant_pad_nd", {x, Value({-2, -2})}); }),
            "aten::constant_pad_nd: narrow(): length must be non-negative (padding -2 and -2 of "
            "dimension 0 of size 3)");
}

// ---- scatter.value ------------------------------------------------------------------------------

// out = self; out[i with i[dim] = index[i]] = value for every i over index's shape, in order.
std::vector<double> ref_scatter(const Tensor& self, int64_t dim, const Tensor& index,
                                double value) {
  std::vector<double> out = self.to_doubles(), idx_v = index.to_doubles();
  const Shape& s = self.shape();
  for (size_t i = 0; i < idx_v.size(); ++i) {
    std::vector<int64_t> at = unravel(int64_t(i), index.shape());
    if (s.empty()) {
      out[0] = value;
      continue;
    }
    at[size_t(dim)] = int64_t(idx_v[i]);
    out[size_t(linear(at, s))] = value;
  }
  return out;
}

Tensor random_index(const Shape& shape, int64_t bound, DType dt, uint32_t seed) {
  std::mt19937 rng(seed);
  return fill_each(Tensor::empty(shape, dt), [&] { return double(rng() % uint32_t(bound)); });
}

TEST(AtenTrainOps, ScatterValueMatchesReference) {
  const Shape self_shape = {4, 3, 5};
  uint32_t seed = 1;
  for (int64_t dim : {0, 1, 2, -1}) {
    const int64_t d = dim < 0 ? dim + 3 : dim;
    // index no larger than self apart from dim, and larger along it (repeated indices).
    Shape ishape = {3, 2, 4};
    ishape[size_t(d)] = self_shape[size_t(d)] + 2;
    for (DType dt : kPadTypes) {
      for (Layout layout : kLayouts) {
        for (DType it : {DType::i64, DType::i32}) {
          Tensor x = random_tensor(self_shape, dt, seed++, layout);
          std::vector<double> before = x.to_doubles();
          Tensor index = random_index(ishape, self_shape[size_t(d)], it, seed++);
          const double value = dt == DType::boolean ? 1 : is_floating(dt) ? -0.25 : 7;
          Value v = is_floating(dt) ? Value(value) : Value(int64_t(value));
          Tensor y = call_t("aten::scatter.value", {x, dim, index, v});
          const std::string what = fmt::format("scatter dim {} {} {} index {}", dim,
                                               dtype_name(dt), layout_name(layout),
                                               dtype_name(it));
          ASSERT_EQ(y.shape(), self_shape) << what;
          expect_close(y, ref_scatter(x, d, index, value), dt, what);
          EXPECT_EQ(x.to_doubles(), before) << what << ": self is not written";
        }
      }
    }
  }
  // nll_loss's backward: a one-hot row per target, from zeros, value -1 (f32 and bf16).
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor x = Tensor::zeros({6, 11}, dt);
    Tensor target = longs({6, 1}, {3, 0, 10, 3, 7, 7});
    expect_close(call_t("aten::scatter.value", {x, int64_t(1), target, -1.0}),
                 ref_scatter(x, 1, target, -1.0), dt, "one-hot scatter");
  }
  // An empty index writes nothing; a 0-dim self and index; a transposed (strided) index.
  Tensor x = random_tensor({2, 3}, DType::f32, 5);
  expect_close(call_t("aten::scatter.value", {x, int64_t(1), Tensor::empty({2, 0}, DType::i64), 1.0}),
               x.to_doubles(), DType::f32, "empty index");
  Tensor s = Tensor::full({}, DType::f32, 2);
  expect_close(call_t("aten::scatter.value", {s, int64_t(0), Tensor::full({}, DType::i64, 0), 5.0}),
               {5.0}, DType::f32, "0-dim");
  Tensor it = longs({2, 2}, {0, 1, 1, 0}).as_strided({2, 2}, {1, 2}, 0);
  expect_close(call_t("aten::scatter.value", {x, int64_t(0), it, 9.0}), ref_scatter(x, 0, it, 9.0),
               DType::f32, "transposed index");
}

TEST(AtenTrainOps, ScatterValueErrors) {
  Tensor x = random_tensor({2, 3}, DType::f32, 1);
  auto scatter = [&](int64_t dim, const Tensor& index) {
    return usage_error_of([&] { call("aten::scatter.value", {x, dim, index, 1.0}); });
  };
  EXPECT_EQ(scatter(0, random_tensor({2, 3}, DType::f32, 2)),
            "aten::scatter.value: scatter(): Expected dtype int32/int64 for index, got f32");
  EXPECT_EQ(scatter(0, longs({2}, {0, 1})),
            "aten::scatter.value: Index tensor must have the same number of dimensions as self "
            "tensor (self has shape [2, 3], index has shape [2])");
  EXPECT_EQ(scatter(1, longs({3, 3}, {0, 0, 0, 0, 0, 0, 0, 0, 0})),
            "aten::scatter.value: Expected index [3, 3] to be no larger than self [2, 3] apart from "
            "dimension 1");
  EXPECT_EQ(scatter(0, longs({1, 2}, {0, 2})),
            "aten::scatter.value: index 2 is out of bounds for dimension 0 with size 2");
  EXPECT_EQ(scatter(1, longs({1, 2}, {0, -1})),
            "aten::scatter.value: index -1 is out of bounds for dimension 1 with size 3");
  EXPECT_NE(scatter(2, longs({1, 1}, {0})).find("dim 2 out of range for a tensor of rank 2"),
            std::string::npos);
}

// ---- slice_scatter ------------------------------------------------------------------------------

TEST(AtenTrainOps, SliceScatterMatchesReference) {
  struct Case {
    Shape shape;
    int64_t dim;
    Value start, end;
    int64_t step;
  };
  const Case cases[] = {{{5, 7}, 1, int64_t(1), int64_t(6), 2},
                        {{5, 7}, 0, Value(), Value(), 1},
                        {{5, 7}, -1, int64_t(-3), Value(), 1},  // rotary's x[..., d/2:]
                        {{5, 7}, -1, Value(), int64_t(3), 1},   // and x[..., :d/2]
                        {{2, 3, 8}, 2, int64_t(0), int64_t(100), 3},
                        {{4, 6}, 0, int64_t(2), int64_t(2), 1},  // an empty slice
                        {{0, 6}, 1, int64_t(1), int64_t(4), 1}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    for (DType dt : kPadTypes) {
      for (Layout layout : kLayouts) {
        Tensor x = random_tensor(c.shape, dt, seed++, layout);
        std::vector<double> before = x.to_doubles();
        // The slice's shape, its indices along dim.
        const int64_t d = c.dim < 0 ? c.dim + int64_t(c.shape.size()) : c.dim;
        const int64_t size = c.shape[size_t(d)];
        int64_t b = c.start.is_none() ? 0 : c.start.to_int(), e = c.end.is_none() ? size : c.end.to_int();
        if (b < 0) b += size;
        if (e < 0) e += size;
        b = std::clamp<int64_t>(b, 0, size);
        e = std::clamp<int64_t>(e, b, size);
        std::vector<int64_t> along;
        for (int64_t k = b; k < e; k += c.step) along.push_back(k);
        Shape sshape = c.shape;
        sshape[size_t(d)] = int64_t(along.size());
        Tensor src = random_tensor(sshape, dt, seed++, layout);
        Tensor y = call_t("aten::slice_scatter", {x, src, c.dim, c.start, c.end, c.step});
        std::vector<double> want = before, sv = src.to_doubles();
        for (size_t i = 0; i < sv.size(); ++i) {
          std::vector<int64_t> at = unravel(int64_t(i), sshape);
          at[size_t(d)] = along[size_t(at[size_t(d)])];
          want[size_t(linear(at, c.shape))] = sv[i];
        }
        const std::string what = fmt::format("slice_scatter {} dim {} {} {}", shape_str(c.shape),
                                             c.dim, dtype_name(dt), layout_name(layout));
        ASSERT_EQ(y.shape(), c.shape) << what;
        expect_close(y, want, dt, what);
        EXPECT_EQ(x.to_doubles(), before) << what << ": self is not written";
      }
    }
  }
  // src of another dtype is converted (PyTorch copies it in).
  Tensor x = random_tensor({3, 4}, DType::bf16, 1);
  Tensor src = random_tensor({3, 2}, DType::f32, 2);
  Tensor y = call_t("aten::slice_scatter", {x, src, int64_t(1), int64_t(2)});
  std::vector<double> want = x.to_doubles(), sv = src.to_doubles();
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t k = 0; k < 2; ++k) want[size_t(r * 4 + 2 + k)] = sv[size_t(r * 2 + k)];
  expect_close(y, want, DType::bf16, "slice_scatter converting src");
}

TEST(AtenTrainOps, SliceScatterErrors) {
  Tensor x = random_tensor({2, 3}, DType::f32, 1);
  EXPECT_EQ(usage_error_of([&] {
              call("aten::slice_scatter",
                   {x, random_tensor({2, 2}, DType::f32, 2), int64_t(1), int64_t(0), int64_t(1)});
            }),
            "aten::slice_scatter: expected src to have a size equal to the slice of self. src size "
            "= [2, 2], slice size = [2, 1]");
  EXPECT_EQ(usage_error_of([&] {
              call("aten::slice_scatter",
                   {x, random_tensor({2, 3}, DType::f32, 2), int64_t(1), Value(), Value(), int64_t(0)});
            }),
            "aten::slice_scatter: slice step must be positive, got 0");
}

// ---- _log_softmax -------------------------------------------------------------------------------

std::vector<double> ref_log_softmax(const Tensor& x, int64_t dim) {
  const Shape& s = x.shape();
  std::vector<double> v = x.to_doubles(), out(v.size());
  const int64_t n = s[size_t(dim)];
  for (size_t i = 0; i < v.size(); ++i) {
    std::vector<int64_t> at = unravel(int64_t(i), s);
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      at[size_t(dim)] = k;
      mx = std::max(mx, v[size_t(linear(at, s))]);
    }
    for (int64_t k = 0; k < n; ++k) {
      at[size_t(dim)] = k;
      sum += std::exp(v[size_t(linear(at, s))] - mx);
    }
    out[i] = v[i] - mx - std::log(sum);
  }
  return out;
}

TEST(AtenTrainOps, LogSoftmaxMatchesReference) {
  struct Case {
    Shape shape;
    int64_t dim;
  };
  const Case cases[] = {{{3, 7}, -1}, {{3, 7}, 0}, {{2, 5, 3}, 1}, {{4, 1}, 1}, {{1, 33}, 1},
                        {{0, 4}, 1}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    for (DType dt : kFloatTypes) {
      for (Layout layout : kLayouts) {
        Tensor x = random_tensor(c.shape, dt, seed++, layout);
        const int64_t d = c.dim < 0 ? c.dim + int64_t(c.shape.size()) : c.dim;
        std::vector<double> want = ref_log_softmax(x, d);
        const std::string what = fmt::format("log_softmax {} dim {} {} {}", shape_str(c.shape),
                                             c.dim, dtype_name(dt), layout_name(layout));
        std::vector<double> scale(want.size(), 8.0);  // |x - max| and log(sum) are below 8
        expect_close(call_t("aten::_log_softmax", {x, c.dim, false}), want, dt, what, scale);
        if (dt == DType::bf16 || dt == DType::f16) {
          Tensor y = call_t("aten::_log_softmax", {x, c.dim, true});
          expect_close(y, want, DType::f32, what + " half_to_float", scale);
        }
        Tensor out = Tensor::empty(c.shape, dt);
        call("aten::_log_softmax.out", {x, c.dim, false}, {{"out", out}});
        expect_close(out, want, dt, what + " out", scale);
      }
    }
  }
}

TEST(AtenTrainOps, LogSoftmaxErrors) {
  EXPECT_EQ(usage_error_of([&] {
              call("aten::_log_softmax", {longs({2}, {1, 2}), int64_t(0), false});
            }),
            "aten::_log_softmax: self has dtype i64, which is not supported (expected f32, f64, "
            "bf16 or f16)");
  EXPECT_EQ(usage_error_of([&] {
              call("aten::_log_softmax", {random_tensor({2}, DType::f32, 1), int64_t(0), true});
            }),
            "aten::_log_softmax: half_to_float is only supported for f16 and bf16 inputs, not f32");
}

// ---- clamp and rsub.Scalar ----------------------------------------------------------------------

TEST(AtenTrainOps, ClampMatchesReference) {
  uint32_t seed = 1;
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i64, DType::i32,
                   DType::i8}) {
    for (Layout layout : kLayouts) {
      Tensor x = random_tensor({3, 7}, dt, seed++, layout);
      if (is_floating(dt)) store_double(x.view(), 0, NAN);  // NaN stays NaN
      std::vector<double> v = x.to_doubles();
      struct Bounds {
        Value lo, hi;
      };
      const Bounds bounds[] = {{int64_t(-1), int64_t(1)}, {Value(), int64_t(0)},
                               {int64_t(-5), Value()}, {int64_t(2), int64_t(-2)}};  // lo > hi: hi
      for (const Bounds& b : bounds) {
        std::vector<double> want = v;
        for (double& e : want) {
          if (std::isnan(e)) continue;
          if (!b.lo.is_none()) e = std::max(e, double(b.lo.to_int()));
          if (!b.hi.is_none()) e = std::min(e, double(b.hi.to_int()));
        }
        expect_close(call_t("aten::clamp", {x, b.lo, b.hi}), want, dt,
                     fmt::format("clamp {} {}", dtype_name(dt), layout_name(layout)));
      }
    }
  }
  // The embedding backward's clamp of i64 ids to [-128, 127]; a float bound promotes an integer
  // self to f32 (PyTorch's result type); a NaN bound gives NaN.
  Tensor ids = longs({4}, {-300, -128, 5, 300});
  expect_close(call_t("aten::clamp", {ids, int64_t(-128), int64_t(127)}), {-128, -128, 5, 127},
               DType::i64, "clamp ids");
  expect_close(call_t("aten::clamp", {ids, Value(), 2.5}), {-300, -128, 2.5, 2.5}, DType::f32,
               "clamp promotes");
  expect_close(call_t("aten::clamp", {random_tensor({2}, DType::f32, 1), double(NAN), Value()}),
               {NAN, NAN}, DType::f32, "NaN bound");
  EXPECT_EQ(usage_error_of([&] { call("aten::clamp", {ids, Value(), Value()}); }),
            "aten::clamp: torch.clamp: At least one of 'min' or 'max' must not be None");
}

TEST(AtenTrainOps, RsubScalarMatchesReference) {
  uint32_t seed = 1;
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i64, DType::i32}) {
    for (Layout layout : kLayouts) {
      Tensor x = random_tensor({3, 5}, dt, seed++, layout);
      std::vector<double> v = x.to_doubles();
      for (int64_t alpha : {1, 3}) {
        Value other = is_floating(dt) ? Value(0.75) : Value(int64_t(7));
        const double o = is_floating(dt) ? as_stored(0.75, dt) : 7;
        std::vector<double> want(v.size());
        for (size_t i = 0; i < v.size(); ++i) want[i] = o - double(alpha) * v[i];
        expect_close(call_t("aten::rsub.Scalar", {x, other, alpha}), want, dt,
                     fmt::format("rsub {} {} alpha {}", dtype_name(dt), layout_name(layout), alpha));
      }
    }
  }
  // An int self and a float other give f32 (PyTorch's promotion); bool is refused as sub's.
  expect_close(call_t("aten::rsub.Scalar", {longs({2}, {1, 2}), 0.5}), {-0.5, -1.5}, DType::f32,
               "rsub promotes");
  EXPECT_EQ(usage_error_of([&] {
              call("aten::rsub.Scalar", {Tensor::zeros({2}, DType::boolean), int64_t(1)});
            }),
            "aten::rsub.Scalar: subtraction with a bool tensor or scalar is not supported; use "
            "logical_xor or logical_not instead");
}

}  // namespace

// ---- scaled_dot_product_attention_backward (Note [attention backward]) -------------------------

TEST(AtenTrainOps, AttentionBackwardRefusesAGradOfAnotherShapeOrDtype) {
  Tensor q = random_tensor({1, 2, 3, 4}, DType::f32, 1);
  Tensor k = random_tensor({1, 2, 5, 4}, DType::f32, 2);
  Tensor v = random_tensor({1, 2, 5, 6}, DType::f32, 3);
  const char* op = "aten::scaled_dot_product_attention_backward";
  Tensor wrong_shape = random_tensor({1, 2, 3, 4}, DType::f32, 4);
  Tensor wrong_dtype = random_tensor({1, 2, 3, 6}, DType::f64, 4);
  EXPECT_EQ(usage_error_of([&] { call(op, {wrong_shape, q, k, v}); }),
            "aten::scaled_dot_product_attention_backward: grad_out has shape [1, 2, 3, 4] but the "
            "attention's result has shape [1, 2, 3, 6]");
  EXPECT_EQ(usage_error_of([&] { call(op, {wrong_dtype, q, k, v}); }),
            "aten::scaled_dot_product_attention_backward: grad_out has dtype f64 and query has "
            "dtype f32; expected the same dtype");
}

}  // namespace symmflow::test
