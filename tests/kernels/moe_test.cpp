// The MoE routing ops on the CPU (topk, sort, sort.stable, div.Tensor_mode / div.Scalar_mode,
// histc, empty_permuted, _grouped_mm): every element against a naive reference computed here,
// ties and NaN in the order of Note [sort order], awkward sizes (empty, 0-dim, one element,
// strided inputs), every dtype they take, the values PyTorch 2.13 gives for the cases quoted, and
// the error text of refused inputs.
#include <algorithm>

#include "test_util.hpp"

namespace symmflow::test {
namespace {

Tensor tensor_of(const std::vector<double>& values, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  for (size_t i = 0; i < values.size(); ++i) store_double(t.view(), int64_t(i), values[i]);
  return t;
}

void expect_values(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  std::vector<double> g = got.to_doubles();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " at " << i << ": got " << g[i];
    } else {
      EXPECT_EQ(g[i], want[i]) << what << " at " << i;
      EXPECT_EQ(std::signbit(g[i]), std::signbit(want[i])) << what << " sign at " << i;
    }
  }
}

std::vector<Tensor> call_list(std::string_view op, const std::vector<Value>& args,
                              const KwArgs& kw = {}) {
  return call(op, args, kw).to_tensor_list();
}

// ---- topk / sort --------------------------------------------------------------------------------

// Ties likely (small integers), NaN among floats.
Tensor tie_values(const Shape& shape, DType dtype, uint32_t seed, Layout layout) {
  std::mt19937 rng(seed);
  return fill_each(random_tensor(shape, dtype, seed, layout), [&] {
    double v = dtype == DType::boolean ? double(rng() % 2) : double(int(rng() % 5) - (dtype == DType::u32 ? 0 : 2));
    if (is_floating(dtype) && rng() % 9 == 0) v = rng() % 2 ? NAN : -0.0;
    return v;
  });
}

// Note [sort order] without sorting: the rank of element i of a line is the number of elements
// that come before it (a key strictly before it, or an equal key at a lower index).
void expect_sorted_lines(const Tensor& self, int64_t dim, int64_t k, bool desc,
                         const Tensor& values, const Tensor& indices, const std::string& what) {
  ASSERT_EQ(indices.dtype(), DType::i64) << what;
  ASSERT_EQ(values.dtype(), self.dtype()) << what;
  Shape want_shape = self.shape();
  if (!want_shape.empty()) want_shape[size_t(dim)] = k;
  ASSERT_EQ(values.shape(), want_shape) << what;
  ASSERT_EQ(indices.shape(), want_shape) << what;
  std::vector<double> x = self.contiguous().to_doubles(), v = values.to_doubles(),
                      ix = indices.to_doubles();
  int64_t outer = 1, n = 1, inner = 1;
  if (self.dim() > 0) {
    n = self.size(dim);
    for (int64_t d = 0; d < dim; ++d) outer *= self.size(d);
    for (int64_t d = dim + 1; d < self.dim(); ++d) inner *= self.size(d);
  }
  const int64_t kk = self.dim() == 0 ? 1 : k;
  auto before = [&](double p, int64_t a, double q, int64_t b) {
    if (std::isnan(p) || std::isnan(q)) {
      if (std::isnan(p) && std::isnan(q)) return a < b;
      return desc ? std::isnan(p) : std::isnan(q);
    }
    if (p != q) return desc ? p > q : p < q;
    return a < b;
  };
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<int64_t> at(size_t(n), -1);  // position -> index
      for (int64_t a = 0; a < n; ++a) {
        int64_t rank = 0;
        const double p = x[size_t((o * n + a) * inner + i)];
        for (int64_t b = 0; b < n; ++b) rank += before(x[size_t((o * n + b) * inner + i)], b, p, a);
        at[size_t(rank)] = a;
      }
      for (int64_t j = 0; j < kk; ++j) {
        const size_t out = size_t((o * kk + j) * inner + i);
        const int64_t want = at[size_t(j)];
        ASSERT_EQ(int64_t(ix[out]), want) << what << " line " << o << "," << i << " pos " << j;
        const double wv = x[size_t((o * n + want) * inner + i)];
        if (std::isnan(wv)) {
          EXPECT_TRUE(std::isnan(v[out])) << what;
        } else {
          EXPECT_EQ(v[out], wv) << what << " line " << o << "," << i << " pos " << j;
        }
      }
    }
  }
}

TEST(AtenMoe, TopkEveryDtypeDimAndKAgainstTheRankReference) {
  const DType dtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16,
                          DType::i8,  DType::i32, DType::i64, DType::u32};
  uint32_t seed = 1;
  for (DType dtype : dtypes) {
    for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
      const Shape shape{3, 5, 7};
      Tensor x = tie_values(shape, dtype, seed++, layout);
      for (int64_t dim : {0, 1, 2}) {
        for (int64_t k : {int64_t(0), int64_t(1), int64_t(2), shape[size_t(dim)]}) {
          for (bool largest : {true, false}) {
            std::string what = fmt::format("topk {} {} dim {} k {} largest {}", dtype_name(dtype),
                                           layout_name(layout), dim, k, largest);
            std::vector<Tensor> r = call_list("aten::topk", {x, k, dim, largest});
            ASSERT_EQ(r.size(), 2u) << what;
            expect_sorted_lines(x, dim, k, largest, r[0], r[1], what);
          }
        }
      }
    }
  }
}

TEST(AtenMoe, TopkTiesNanAndTheValuesPyTorchGives) {
  Tensor x = tensor_of({1, 3, 3, 2, 3, 1}, {6}, DType::f32);
  // PyTorch: values [3, 3, 3] (indices [2, 4, 1]: its CPU choice among ties is unspecified).
  std::vector<Tensor> r = call_list("aten::topk", {x, int64_t(3)});
  expect_values(r[0], {3, 3, 3}, "topk values");
  expect_values(r[1], {1, 2, 4}, "topk indices: the lowest indices among ties");
  r = call_list("aten::topk", {x, int64_t(3)}, {{"largest", false}});
  expect_values(r[0], {1, 1, 2}, "topk smallest values");
  expect_values(r[1], {0, 5, 3}, "topk smallest indices");
  r = call_list("aten::topk", {x, int64_t(4)}, {{"sorted", false}});  // sorted anyway
  expect_values(r[0], {3, 3, 3, 2}, "topk sorted=False values");
  Tensor nan = tensor_of({NAN, 1, 2}, {3}, DType::f32);
  r = call_list("aten::topk", {nan, int64_t(2)});  // PyTorch: [nan, 2], [0, 2]
  expect_values(r[0], {NAN, 2}, "topk NaN first");
  expect_values(r[1], {0, 2}, "topk NaN first indices");
  r = call_list("aten::topk", {nan, int64_t(2)}, {{"largest", false}});  // [1, 2], [1, 2]
  expect_values(r[0], {1, 2}, "topk smallest skips NaN");
  expect_values(r[1], {1, 2}, "topk smallest skips NaN indices");
  // A 0-dim self gives its element, even for k = 0 (PyTorch).
  for (int64_t k : {0, 1}) {
    r = call_list("aten::topk", {Tensor::full({}, DType::f32, 5), k});
    ASSERT_EQ(r[0].shape(), Shape{});
    expect_values(r[0], {5}, "topk 0-dim");
    expect_values(r[1], {0}, "topk 0-dim index");
  }
  r = call_list("aten::topk", {Tensor::empty({5, 0}, DType::f32), int64_t(0)});
  EXPECT_EQ(r[0].shape(), (Shape{5, 0}));
  r = call_list("aten::topk", {Tensor::empty({0, 4}, DType::bf16), int64_t(2)});
  EXPECT_EQ(r[1].shape(), (Shape{0, 2}));
  // bf16 in: bf16 values, i64 indices (PyTorch's result types).
  r = call_list("aten::topk", {tensor_of({1, 2}, {2}, DType::bf16), int64_t(1)});
  EXPECT_EQ(r[0].dtype(), DType::bf16);
  EXPECT_EQ(r[1].dtype(), DType::i64);
}

TEST(AtenMoe, TopkRefusals) {
  Tensor x = Tensor::empty({6}, DType::f32);
  expect_error([&] { call("aten::topk", {x, int64_t(7)}); },
               "aten::topk: selected index k out of range (k = 7, dim 0 of self with shape [6] has "
               "size 6)");
  expect_error([&] { call("aten::topk", {x, int64_t(-1)}); },
               "aten::topk: selected index k out of range (k = -1");
  expect_error([&] { call("aten::topk", {Tensor::empty({3}, DType::boolean), int64_t(1)}); },
               "aten::topk: self has dtype bool, which is not supported (expected a floating or "
               "integer dtype; PyTorch's topk refuses bool)");
  expect_error([&] { call("aten::topk", {x, int64_t(1), int64_t(1)}); },
               "dim 1 out of range for a tensor of rank 1");
}

TEST(AtenMoe, SortIsStableInEveryDtypeDimAndDirection) {
  const DType dtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i8,
                          DType::i32, DType::i64, DType::u32, DType::boolean};
  uint32_t seed = 100;
  for (DType dtype : dtypes) {
    for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
      for (const Shape& shape : {Shape{4, 33}, Shape{1, 1}, Shape{0, 3}, Shape{130, 2}}) {
        Tensor x = tie_values(shape, dtype, seed++, layout);
        for (int64_t dim : {0, 1, -1}) {
          for (bool desc : {false, true}) {
            std::string what = fmt::format("sort {} {} {} dim {} desc {}", dtype_name(dtype),
                                           layout_name(layout), shape_str(shape), dim, desc);
            std::vector<Tensor> r = call_list("aten::sort", {x, dim, desc});
            const int64_t d = dim < 0 ? dim + 2 : dim;
            expect_sorted_lines(x, d, shape[size_t(d)], desc, r[0], r[1], what);
            std::vector<Tensor> s = call_list("aten::sort.stable", {x},
                                              {{"stable", true}, {"dim", dim}, {"descending", desc}});
            expect_sorted_lines(x, d, shape[size_t(d)], desc, s[0], s[1], what + " (.stable)");
          }
        }
      }
    }
  }
}

TEST(AtenMoe, SortOfExpertIdsKeepsTokenOrderAndPyTorchsNanOrder) {
  // Expert ids as transformers sorts them: equal ids keep their token order.
  Tensor ids = tensor_of({2, 0, 1, 0, 2, 1, 0, 2}, {8}, DType::i64);
  std::vector<Tensor> r = call_list("aten::sort", {ids});
  expect_values(r[0], {0, 0, 0, 1, 1, 2, 2, 2}, "sorted ids");
  expect_values(r[1], {1, 3, 6, 2, 5, 0, 4, 7}, "stable permutation");
  r = call_list("aten::sort.stable", {ids}, {{"stable", true}, {"descending", true}});
  expect_values(r[1], {0, 4, 7, 2, 5, 1, 3, 6}, "stable descending permutation");
  Tensor x = tensor_of({NAN, 1, -0.0, 0, 2}, {5}, DType::f32);
  r = call_list("aten::sort", {x}, {{"descending", true}});  // PyTorch's results
  expect_values(r[0], {NAN, 2, 1, -0.0, 0}, "sort descending values");
  expect_values(r[1], {0, 4, 1, 2, 3}, "sort descending indices");
  r = call_list("aten::sort", {x});
  expect_values(r[0], {-0.0, 0, 1, 2, NAN}, "sort values");
  expect_values(r[1], {2, 3, 1, 4, 0}, "sort indices");
  r = call_list("aten::sort", {Tensor::full({}, DType::f32, 5)});
  ASSERT_EQ(r[0].shape(), Shape{});
  expect_values(r[1], {0}, "sort 0-dim");
}

// ---- div with a rounding mode -------------------------------------------------------------------

TEST(AtenMoe, DivModesGivePyTorchsValuesAndTypes) {
  Tensor a = tensor_of({7, -7, 7, -7, 0}, {5}, DType::i64);
  Tensor b = tensor_of({2, 2, -2, -2, 3}, {5}, DType::i64);
  Tensor f = call_t("aten::div.Tensor_mode", {a, b}, {{"rounding_mode", std::string("floor")}});
  EXPECT_EQ(f.dtype(), DType::i64);
  expect_values(f, {3, -4, -4, 3, 0}, "floor");
  expect_values(call_t("aten::div.Tensor_mode", {a, b}, {{"rounding_mode", std::string("trunc")}}),
                {3, -3, -3, 3, 0}, "trunc");
  Tensor t = call_t("aten::div.Tensor_mode", {a, b}, {{"rounding_mode", Value()}});
  EXPECT_EQ(t.dtype(), DType::f32);
  expect_values(t, {3.5, -3.5, -3.5, 3.5, 0}, "true division");
  Tensor s = call_t("aten::div.Scalar_mode", {a, 2.5}, {{"rounding_mode", std::string("floor")}});
  EXPECT_EQ(s.dtype(), DType::f32);
  expect_values(s, {2, -3, 2, -3, 0}, "floor by 2.5");
  Tensor z = tensor_of({1, -1, 0, -0.0}, {4}, DType::f32);
  for (const char* mode : {"floor", "trunc"}) {
    expect_values(call_t("aten::div.Scalar_mode", {z, 0.0}, {{"rounding_mode", std::string(mode)}}),
                  {INFINITY, -INFINITY, NAN, NAN}, fmt::format("{} by zero", mode));
  }
  Tensor p = tensor_of({-0.5, 0.5, 5}, {3}, DType::f32);
  Tensor q = tensor_of({3, -3, INFINITY}, {3}, DType::f32);
  expect_values(call_t("aten::div.Tensor_mode", {p, q}, {{"rounding_mode", std::string("floor")}}),
                {-1, -1, 0}, "floor of small quotients");
  // Result types (PyTorch): i32 // 2 and i32 // tensor(2) stay i32; // 2.0 and true division f32.
  Tensor i32 = tensor_of({3, -3}, {2}, DType::i32);
  EXPECT_EQ(call_t("aten::div.Scalar_mode", {i32, int64_t(2)}, {{"rounding_mode", std::string("floor")}}).dtype(), DType::i32);
  EXPECT_EQ(call_t("aten::div.Tensor_mode", {i32, Tensor::full({}, DType::i64, 2)}, {{"rounding_mode", std::string("floor")}}).dtype(), DType::i32);
  EXPECT_EQ(call_t("aten::div.Scalar_mode", {i32, 2.0}, {{"rounding_mode", std::string("floor")}}).dtype(), DType::f32);
  EXPECT_EQ(call_t("aten::div.Scalar_mode", {i32, int64_t(2)}, {{"rounding_mode", Value()}}).dtype(), DType::f32);
  expect_values(call_t("aten::div.Scalar_mode", {i32, int64_t(2)}, {{"rounding_mode", std::string("floor")}}), {1, -2}, "i32 floor");
  Tensor bf = call_t("aten::div.Scalar_mode", {tensor_of({1}, {1}, DType::bf16), int64_t(3)},
                     {{"rounding_mode", std::string("floor")}});
  EXPECT_EQ(bf.dtype(), DType::bf16);
  // INT_MIN // -1 wraps (PyTorch's CPU traps).
  Tensor m = tensor_of({-9223372036854775808.0}, {1}, DType::i64);
  Tensor w = call_t("aten::div.Scalar_mode", {m, int64_t(-1)}, {{"rounding_mode", std::string("floor")}});
  EXPECT_EQ(w.data<int64_t>()[0], INT64_MIN);
}

// A naive reference: the quotient in double, rounded to the compute type, then floored or
// truncated (floor of an exact integer quotient for integers).
double ref_div(double a, double b, const std::string& mode, DType dtype) {
  if (!is_floating(dtype)) {
    auto x = int64_t(a), y = int64_t(b);
    int64_t qt = x / y;
    if (mode == "floor" && x % y != 0 && ((x % y < 0) != (y < 0))) --qt;
    return as_stored(double(qt), dtype);
  }
  double r = a / b;
  if (dtype != DType::f64) r = double(float(r));
  if (mode == "floor") r = std::floor(r);
  if (mode == "trunc") r = std::trunc(r);
  return as_stored(r, dtype);
}

TEST(AtenMoe, DivModesEveryDtypeBroadcastAndStridedAgainstTheReference) {
  const DType dtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16,
                          DType::i8,  DType::i32, DType::i64, DType::u32};
  uint32_t seed = 300;
  for (DType dtype : dtypes) {
    for (const char* mode : {"floor", "trunc", ""}) {
      for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
        Tensor a = random_tensor({4, 1, 9}, dtype, seed++, layout);
        Tensor b = random_tensor({3, 9}, dtype, seed++, Layout::strided);
        // No zero divisor (integers raise; floats are checked above).
        std::vector<double> bv = b.to_doubles();
        for (size_t i = 0; i < bv.size(); ++i) {
          std::vector<int64_t> idx = unravel(int64_t(i), b.shape());
          if (bv[i] == 0) store_double(b.view(), idx[0] * b.strides()[0] + idx[1] * b.strides()[1], 3);
        }
        Value rm = *mode ? Value(std::string(mode)) : Value();
        Tensor got = call_t("aten::div.Tensor_mode", {a, b}, {{"rounding_mode", rm}});
        const DType rt = *mode ? dtype : (is_floating(dtype) ? dtype : DType::f32);
        ASSERT_EQ(got.dtype(), rt);
        std::vector<double> want = ref_binary(a, b, {4, 3, 9}, [&](double x, double y) {
          return ref_div(x, y, mode, rt);
        });
        expect_close(got, want, rt, fmt::format("div {} '{}' {}", dtype_name(dtype), mode,
                                                layout_name(layout)));
        Tensor gs = call_t("aten::div.Scalar_mode", {a, int64_t(-3)}, {{"rounding_mode", rm}});
        std::vector<double> av = a.contiguous().to_doubles(), ws(av.size());
        const double sv = dtype == DType::u32 && *mode ? 4294967293.0 : -3;  // u32 wraps -3
        for (size_t i = 0; i < av.size(); ++i) ws[i] = ref_div(av[i], sv, mode, rt);
        expect_close(gs, ws, rt, fmt::format("div.Scalar {} '{}'", dtype_name(dtype), mode));
      }
    }
  }
}

TEST(AtenMoe, DivModeRefusals) {
  Tensor a = tensor_of({1, 2}, {2}, DType::i32);
  expect_error([&] { call("aten::div.Tensor_mode", {a, a}, {{"rounding_mode", std::string("round")}}); },
               "aten::div.Tensor_mode: div expected rounding_mode to be one of None, 'trunc', or "
               "'floor' but found 'round'");
  Tensor t = tensor_of({1, 0}, {2}, DType::boolean);
  expect_error([&] { call("aten::div.Tensor_mode", {t, t}, {{"rounding_mode", std::string("floor")}}); },
               "aten::div.Tensor_mode: rounding_mode 'floor' of bool operands is not supported");
  expect_error([&] { call("aten::div.Scalar_mode", {a, int64_t(0)}, {{"rounding_mode", std::string("trunc")}}); },
               "aten::div.Scalar_mode: ZeroDivisionError (integer division by zero)");
  expect_error([&] { call("aten::div.Tensor_mode", {a, Tensor::empty({3}, DType::i32)}, {{"rounding_mode", std::string("floor")}}); },
               "do not broadcast");
}

// ---- histc --------------------------------------------------------------------------------------

Tensor histc(const Tensor& x, int64_t bins, Value min, Value max) {
  return call_t("aten::histc", {x, bins, std::move(min), std::move(max)});
}

TEST(AtenMoe, HistcGivesPyTorchsCountsAndEdges) {
  Tensor x = tensor_of({0, 1, 2, 3, 3, 4, -1, 5, NAN}, {9}, DType::f32);
  expect_values(histc(x, 4, int64_t(0), int64_t(3)), {1, 1, 1, 2}, "max in the last bin, NaN and outside ignored");
  expect_values(histc(x.as_strided({6}, {1}, 0), 4, int64_t(0), int64_t(0)), {1, 1, 1, 3}, "data range");
  expect_values(histc(tensor_of({0, 1, 2, 3}, {4}, DType::f32), 4, int64_t(2), int64_t(2)),
                {1, 1, 1, 1}, "min == max != 0 takes the data range too");
  expect_values(histc(tensor_of({2, 2}, {2}, DType::f32), 4, int64_t(0), int64_t(0)), {0, 0, 2, 0},
                "one value widens to [v - 1, v + 1]");
  expect_values(histc(Tensor::empty({0}, DType::f32), 4, int64_t(0), int64_t(0)), {0, 0, 0, 0}, "empty");
  expect_values(histc(tensor_of({0, 1, 2, 7}, {2, 2}, DType::f32), 8, int64_t(0), int64_t(7)),
                {1, 1, 1, 0, 0, 0, 0, 1}, "2-d");
  expect_values(histc(tensor_of({0.1, 0.29999, 0.3, 0.7}, {4}, DType::f32), 10, int64_t(0), int64_t(1)),
                {0, 1, 1, 1, 0, 0, 0, 1, 0, 0}, "f32 edges");
  Tensor bf = histc(tensor_of({1, 2}, {2}, DType::bf16), 4, int64_t(0), int64_t(3));
  EXPECT_EQ(bf.dtype(), DType::bf16);
  expect_values(bf, {0, 1, 1, 0}, "bf16");
  EXPECT_EQ(histc(tensor_of({1}, {1}, DType::f64), 4, 0.0, 3.0).dtype(), DType::f64);
  // Mixtral: histc(expert ids as float, num_experts, 0, num_experts - 1) counts tokens per expert.
  for (DType dtype : kFloatTypes) {
    std::vector<double> ids;
    std::vector<double> count(8, 0);
    std::mt19937 rng(7);
    for (int i = 0; i < 200; ++i) {
      ids.push_back(double(rng() % 8));
      count[size_t(ids.back())] += 1;
    }
    expect_values(histc(tensor_of(ids, {100, 2}, dtype), 8, int64_t(0), int64_t(7)), count,
                  fmt::format("expert counts {}", dtype_name(dtype)));
  }
}

TEST(AtenMoe, HistcOfGridValuesEveryFloatDtypeAndLayout) {
  uint32_t seed = 500;
  for (DType dtype : kFloatTypes) {
    for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
      Tensor x = random_tensor({6, 11}, dtype, seed, layout);
      std::mt19937 rng(seed++);
      std::vector<double> want(8, 0);
      for (int64_t i = 0; i < 6; ++i) {
        for (int64_t j = 0; j < 11; ++j) {
          double v = double(int(rng() % 81) - 40) / 16;  // multiples of 1/16 in [-2.5, 2.5]
          store_double(x.view(), i * x.strides()[0] + j * x.strides()[1], v);
          if (v < -2 || v > 2) continue;
          want[size_t(std::min(7.0, std::floor((v + 2) * 2)))] += 1;
        }
      }
      expect_values(histc(x, 8, -2.0, 2.0), want,
                    fmt::format("histc {} {}", dtype_name(dtype), layout_name(layout)));
    }
  }
}

TEST(AtenMoe, HistcRefusals) {
  Tensor x = tensor_of({0, 1}, {2}, DType::f32);
  expect_error([&] { histc(x, 0, int64_t(0), int64_t(3)); },
               "aten::histc: torch.histogram(): bins must be > 0, but got 0 for dimension 0");
  expect_error([&] { histc(x, 4, int64_t(3), int64_t(1)); },
               "aten::histc: torch.histc: max must be larger than min (min = 3, max = 1)");
  expect_error([&] { histc(x, 4, 0.0, INFINITY); },
               "aten::histc: torch.histc: range of [0, inf] is not finite");
  expect_error([&] { histc(tensor_of({1, NAN}, {2}, DType::f32), 4, int64_t(0), int64_t(0)); },
               "aten::histc: torch.histc: range of [nan, nan] is not finite");
  expect_error([&] { histc(Tensor::empty({2}, DType::boolean), 4, int64_t(0), int64_t(3)); },
               "aten::histc: self has dtype bool, which is not supported (expected a float or integer dtype)");
  expect_error([&] { histc(tensor_of({1, 2}, {2}, DType::i32), 4, 3.5, 1.2); },
               "aten::histc: torch.histc: max must be larger than min (min = 3, max = 1)");
}

// Note [integer histc]: PyTorch's CUDA arithmetic (the range truncated to the dtype, int64 bins
// with truncating division), which transformers' MoE layers use on GPUs with int32 expert ids.
TEST(AtenMoe, HistcOfIntegersAsCudaComputesIt) {
  for (DType dtype : {DType::i32, DType::i64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = tensor_of({0, 1, 2, 3, 3, 4, -1, 5}, {8}, dtype);
    Tensor h = histc(x, 4, int64_t(0), int64_t(3));
    EXPECT_EQ(h.dtype(), dtype);
    expect_values(h, {1, 1, 1, 2}, "max in the last bin, outside ignored");
    // min 0.5 and max 2.5 are 0 and 2 in int: 0 -> bin 0, 1 -> 1 * 2 / 2 = 1, 2 -> the last bin
    // (as floats it would be {1, 1}: 0 outside, 1 in bin 0)
    expect_values(histc(tensor_of({0, 1, 2}, {3}, dtype), 2, 0.5, 2.5), {1, 2}, "range truncated");
    expect_values(histc(tensor_of({0, 1, 2, 3, 4, 5, 6, 7}, {8}, dtype), 3, int64_t(0), int64_t(7)),
                  {3, 2, 3}, "truncating division");
    expect_values(histc(tensor_of({5, 5}, {2}, dtype), 4, int64_t(0), int64_t(0)), {0, 0, 2, 0},
                  "one value widens to [v - 1, v + 1]");
    expect_values(histc(tensor_of({-3, 9, 2}, {3}, dtype), 4, int64_t(0), int64_t(0)), {1, 1, 0, 1},
                  "data range [-3, 9]: (v + 3) * 4 / 12");
    std::vector<double> ids, count(8, 0);
    std::mt19937 rng(9);
    for (int i = 0; i < 300; ++i) {
      ids.push_back(double(rng() % 9));  // 8 is outside [0, 7]: an expert-parallel sentinel
      if (ids.back() < 8) count[size_t(ids.back())] += 1;
    }
    expect_values(histc(tensor_of(ids, {300}, dtype), 8, int64_t(0), int64_t(7)), count, "expert counts");
  }
}

// ---- empty_permuted -----------------------------------------------------------------------------

TEST(AtenMoe, EmptyPermutedIsAContiguousAllocation) {
  Tensor t = call_t("aten::empty_permuted", {std::vector<int64_t>{2, 3, 4}, std::vector<int64_t>{2, 0, 1}},
                    {{"dtype", DType::bf16}});
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.dtype(), DType::bf16);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(call_t("aten::empty_permuted", {std::vector<int64_t>{0, 5}, std::vector<int64_t>{1, 0}}).dtype(),
            DType::f32);
  expect_error([&] { call("aten::empty_permuted", {std::vector<int64_t>{2, 3}, std::vector<int64_t>{0, 0}}); },
               "aten::empty_permuted: Duplicate dim not allowed (physical_layout [0, 0])");
  expect_error([&] { call("aten::empty_permuted", {std::vector<int64_t>{2, 3}, std::vector<int64_t>{0}}); },
               "aten::empty_permuted: Number of dimensions in size does not match the length of the "
               "physical_layout; i.e. len(size) = 2 is not equal to len(physical_layout) = 1");
  expect_error([&] { call("aten::empty_permuted", {std::vector<int64_t>{2, 3}, std::vector<int64_t>{0, 2}}); },
               "aten::empty_permuted: physical_layout entry 2 is out of range for 2 dims");
}

// ---- _grouped_mm --------------------------------------------------------------------------------

std::vector<double> ref_grouped_mm(const Tensor& a, const Tensor& b, const std::vector<int64_t>& ends) {
  const int64_t S = a.size(0), K = a.size(1), N = b.size(2);
  std::vector<double> out(size_t(S * N), 0);
  int64_t start = 0;
  for (size_t g = 0; g < ends.size(); ++g) {
    for (int64_t r = start; r < ends[g]; ++r) {
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t ai[] = {r, k}, bi[] = {int64_t(g), k, n};
          acc += a.item_as_double(ai) * b.item_as_double(bi);
        }
        out[size_t(r * N + n)] = acc;
      }
    }
    start = ends[g];
  }
  return out;
}

TEST(AtenMoe, GroupedMmPerGroupProductsEmptyGroupsAndZeroTail) {
  const int64_t S = 10, K = 8, N = 5, G = 3;
  struct Case {
    std::vector<int64_t> ends;
  };
  const Case cases[] = {{{2, 2, 7}}, {{0, 0, 10}}, {{3, 6, 10}}, {{0, 0, 0}}};
  uint32_t seed = 700;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (DType offs_dtype : {DType::i32, DType::i64}) {
      for (Layout layout : {Layout::contiguous, Layout::transposed}) {
        for (const Case& c : cases) {
          Tensor a = random_tensor({S, K}, dtype, seed++, layout);
          Tensor b = random_tensor({G, K, N}, dtype, seed++, layout);
          std::vector<double> e(c.ends.begin(), c.ends.end());
          Tensor offs = tensor_of(e, {G}, offs_dtype);
          std::string what = fmt::format("_grouped_mm {} offs {} {} ends {}", dtype_name(dtype),
                                         dtype_name(offs_dtype), layout_name(layout),
                                         fmt::join(c.ends, ","));
          Tensor got = call_t("aten::_grouped_mm", {a, b, offs});
          ASSERT_EQ(got.dtype(), dtype) << what;
          ASSERT_EQ(got.shape(), (Shape{S, N})) << what;
          Tolerance tol = tolerance(dtype);
          std::vector<double> want = ref_grouped_mm(a, b, c.ends), g = got.to_doubles();
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_NEAR(g[i], want[i], tol.atol * 8 + tol.rtol * 4 * std::abs(want[i])) << what << " at " << i;
            if (int64_t(i) / N >= c.ends.back()) {
              ASSERT_EQ(g[i], 0) << what << ": tail row";
            }
          }
        }
      }
    }
  }
}

TEST(AtenMoe, GroupedMmRefusals) {
  Tensor a = Tensor::empty({4, 8}, DType::f32), b = Tensor::empty({2, 8, 3}, DType::f32);
  Tensor offs = tensor_of({2, 4}, {2}, DType::i32);
  expect_error([&] { call("aten::_grouped_mm", {a, b}); },
               "aten::_grouped_mm: only self [S, K] (rows sorted by group) with mat2 [G, K, N] and "
               "offs [G] is supported; got self of shape [4, 8], mat2 of shape [2, 8, 3] and offs None");
  expect_error([&] { call("aten::_grouped_mm", {Tensor::empty({2, 4, 8}, DType::f32), b, offs}); },
               "got self of shape [2, 4, 8]");
  expect_error([&] { call("aten::_grouped_mm", {a, Tensor::empty({8, 3}, DType::f32), offs}); },
               "mat2 of shape [8, 3]");
  expect_error([&] { call("aten::_grouped_mm", {a, b, tensor_of({3, 2}, {2}, DType::i32)}); },
               "aten::_grouped_mm: offs must be non-decreasing row ends in [0, 4]; offs[1] = 2 after 3");
  expect_error([&] { call("aten::_grouped_mm", {a, b, tensor_of({2, 5}, {2}, DType::i64)}); },
               "offs[1] = 5 after 2");
  expect_error([&] { call("aten::_grouped_mm", {a, b, tensor_of({4}, {1}, DType::i32)}); },
               "aten::_grouped_mm: offs must be 1-D with one entry per group (mat2 has 2 groups), got shape [1]");
  expect_error([&] { call("aten::_grouped_mm", {a, b, tensor_of({2, 4}, {2}, DType::f32)}); },
               "aten::_grouped_mm: offs has dtype f32, which is not supported (expected i32 or i64)");
  expect_error([&] { call("aten::_grouped_mm", {a, b, offs, Tensor::empty({2, 3}, DType::f32)}); },
               "aten::_grouped_mm: bias is not supported (PyTorch: Bias not supported yet)");
  expect_error([&] { call("aten::_grouped_mm", {a, b, offs}, {{"out_dtype", DType::bf16}}); },
               "aten::_grouped_mm: Grouped gemm output dtype must match `mat_a` dtype (f32), got bf16");
  expect_error([&] { call("aten::_grouped_mm", {Tensor::empty({4, 8}, DType::f64), Tensor::empty({2, 8, 3}, DType::f64), offs}); },
               "aten::_grouped_mm: self has dtype f64, which is not supported (expected f32, bf16 or f16)");
  expect_error([&] { call("aten::_grouped_mm", {a, Tensor::empty({2, 8, 3}, DType::bf16), offs}); },
               "aten::_grouped_mm: self has dtype f32 and mat2 has dtype bf16; expected the same dtype");
  expect_error([&] { call("aten::_grouped_mm", {a, Tensor::empty({2, 7, 3}, DType::f32), offs}); },
               "do not multiply (K = 8 vs 7)");
}

}  // namespace
}  // namespace symmflow::test
