// The comparisons (eq/ne/lt/le/gt/ge, .Tensor and .Scalar), the bitwise ops (bitwise_and/or/xor,
// bitwise_not), logical_or and lift_fresh_copy on the CPU: every element against a naive
// reference computed here, with broadcasting, strided inputs, bool, integer and float dtypes,
// PyTorch's promotion (the comparison runs in the promoted type), -inf/inf/NaN Scalars, exact
// 64-bit integers, and the error text of refused inputs.
#include "test_util.hpp"

#include "symmflow/ops/registry.hpp"
#include "symmflow/schema/schema.hpp"

namespace symmflow::test {
namespace {

struct NamedCmp {
  const char* name;
  bool (*f)(double, double);
};
const NamedCmp kCmps[] = {
    {"eq", [](double a, double b) { return a == b; }}, {"ne", [](double a, double b) { return a != b; }},
    {"lt", [](double a, double b) { return a < b; }},  {"le", [](double a, double b) { return a <= b; }},
    {"gt", [](double a, double b) { return a > b; }},  {"ge", [](double a, double b) { return a >= b; }},
};

// Small values (so that equal pairs are common), NaN and +-inf among floats.
Tensor small_values(const Shape& shape, DType dtype, uint32_t seed, Layout layout) {
  std::mt19937 rng(seed);
  return fill_each(random_tensor(shape, dtype, seed, layout), [&] {
    double v = dtype == DType::boolean ? double(rng() % 2) : double(int(rng() % 4) - 1);
    if (is_floating(dtype) && rng() % 7 == 0) {
      const double special[] = {NAN, INFINITY, -INFINITY, 0.5};
      v = special[rng() % 4];
    }
    return v;
  });
}

TEST(AtenLogic, ComparisonsOfTensorsBroadcastAndPromote) {
  struct Case {
    DType a, b;
  };
  const Case cases[] = {{DType::f32, DType::f32}, {DType::i64, DType::f32}, {DType::bf16, DType::f16},
                        {DType::i32, DType::i64}, {DType::boolean, DType::boolean},
                        {DType::u32, DType::i8},  {DType::f64, DType::bf16}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    for (Layout layout : {Layout::contiguous, Layout::strided}) {
      Tensor a = small_values({3, 1, 7}, c.a, seed++, layout);
      Tensor b = small_values({5, 7}, c.b, seed++, Layout::transposed);
      for (const NamedCmp& cmp : kCmps) {
        std::string what = fmt::format("{}.Tensor {} {} {}", cmp.name, dtype_name(c.a),
                                       dtype_name(c.b), layout_name(layout));
        Tensor got = call_t(fmt::format("aten::{}.Tensor", cmp.name), {a, b});
        ASSERT_EQ(got.shape(), (Shape{3, 5, 7})) << what;
        expect_close(got, ref_binary(a, b, {3, 5, 7}, [&](double x, double y) {
                       return cmp.f(x, y) ? 1.0 : 0.0;
                     }), DType::boolean, what);
      }
    }
  }
}

TEST(AtenLogic, ComparisonsWithScalarsIncludingInfAndNan) {
  const Value scalars[] = {int64_t(0), 0.5, -INFINITY, INFINITY, NAN, true, int64_t(-1)};
  uint32_t seed = 100;
  for (DType dtype : {DType::f32, DType::bf16, DType::f64, DType::i64, DType::i8, DType::boolean}) {
    Tensor x = small_values({4, 13}, dtype, seed++, Layout::strided);
    for (const Value& s : scalars) {
      // An integer tensor compared with a float Scalar compares in f32: values stay exact here.
      for (const NamedCmp& cmp : kCmps) {
        std::string what =
            fmt::format("{}.Scalar {} {}", cmp.name, dtype_name(dtype), s.str());
        Tensor got = call_t(fmt::format("aten::{}.Scalar", cmp.name), {x, s});
        std::vector<double> xv = x.to_doubles(), want(xv.size());
        const double o = s.to_double();
        for (size_t i = 0; i < xv.size(); ++i) want[i] = cmp.f(xv[i], o) ? 1 : 0;
        expect_close(got, want, DType::boolean, what);
      }
    }
  }
}

TEST(AtenLogic, ComparisonsRunInThePromotedType) {
  // 2^24 + 1 as i64 rounds to 2^24 in f32 (the promoted type of i64 and f32), as in PyTorch.
  Tensor i = Tensor::from_vector<int64_t>({16777217, 3}, {2});
  Tensor f = Tensor::from_vector<float>({16777216.f, 3.f}, {2});
  EXPECT_EQ(call_t("aten::eq.Tensor", {i, f}).to_doubles(), (std::vector<double>{1, 1}));
  // 64-bit integers compare exactly (no trip through double).
  Tensor big = Tensor::from_vector<int64_t>({(int64_t(1) << 60) + 1, -5}, {2});
  EXPECT_EQ(call_t("aten::gt.Scalar", {big, int64_t(1) << 60}).to_doubles(),
            (std::vector<double>{1, 0}));
  EXPECT_EQ(call_t("aten::ne.Scalar", {big, int64_t(1) << 60}).to_doubles(),
            (std::vector<double>{1, 1}));
  // A float Scalar compared with an integer tensor compares in f32: 2 < 2.5.
  Tensor two = Tensor::from_vector<int32_t>({2, 3}, {2});
  EXPECT_EQ(call_t("aten::lt.Scalar", {two, 2.5}).to_doubles(), (std::vector<double>{1, 0}));
  // A 0-dim f64 tensor does not promote an f32 tensor: 0.1 rounds to f32 before comparing.
  Tensor tenth = Tensor::from_vector<float>({0.1f}, {1});
  EXPECT_EQ(call_t("aten::eq.Tensor", {tenth, Tensor::full({}, DType::f64, 0.1)}).to_doubles(),
            (std::vector<double>{1}));
  EXPECT_EQ(call_t("aten::eq.Scalar", {tenth, 0.1}).to_doubles(), (std::vector<double>{1}));
}

TEST(AtenLogic, ComparisonErrors) {
  Tensor a = Tensor::empty({3}, DType::f32), b = Tensor::empty({4}, DType::f32);
  expect_error([&] { call("aten::lt.Tensor", {a, b}); },
               "aten::lt.Tensor: self with shape [3] and other with shape [4] do not broadcast");
  expect_error([&] { call("aten::ge.Scalar", {a, b}); },
               "aten::ge.Scalar: argument 'other' expects Scalar but got Tensor (f32[4])");
  EXPECT_EQ(call_t("aten::ne.Tensor", {Tensor::empty({0, 3}, DType::i32), a}).shape(),
            (Shape{0, 3}));
}

int64_t bit(const char* op, int64_t x, int64_t y) {
  std::string_view o = op;
  if (o == "bitwise_and") return x & y;
  if (o == "bitwise_or") return x | y;
  if (o == "bitwise_xor") return x ^ y;
  return ~x;
}

TEST(AtenLogic, BitwiseOpsOfTensors) {
  uint32_t seed = 200;
  for (DType dtype : {DType::boolean, DType::i8, DType::i32, DType::i64, DType::u32}) {
    Tensor a = random_tensor({2, 1, 9}, dtype, seed++, Layout::strided);
    Tensor b = random_tensor({3, 9}, dtype, seed++);
    for (const char* op : {"bitwise_and", "bitwise_or", "bitwise_xor"}) {
      std::string what = fmt::format("{} {}", op, dtype_name(dtype));
      Tensor got = call_t(fmt::format("aten::{}.Tensor", op), {a, b});
      ASSERT_EQ(got.shape(), (Shape{2, 3, 9})) << what;
      expect_close(got, ref_binary(a, b, {2, 3, 9}, [&](double x, double y) {
                     return double(bit(op, int64_t(x), int64_t(y)));
                   }), dtype, what);
    }
    Tensor n = call_t("aten::bitwise_not", {a});
    std::vector<double> av = a.to_doubles(), want(av.size());
    for (size_t i = 0; i < av.size(); ++i) {
      want[i] = dtype == DType::boolean ? double(av[i] == 0) : double(~int64_t(av[i]));
    }
    expect_close(n, want, dtype, fmt::format("bitwise_not {}", dtype_name(dtype)));
  }
  // Mixed types promote: bool with i32 is i32.
  Tensor m = Tensor::from_vector<bool>({true, false}, {2});
  Tensor k = Tensor::from_vector<int32_t>({6, 7}, {2});
  Tensor r = call_t("aten::bitwise_or.Tensor", {m, k});
  EXPECT_EQ(r.dtype(), DType::i32);
  EXPECT_EQ(r.to_doubles(), (std::vector<double>{7, 7}));
}

TEST(AtenLogic, BitwiseOpsWithScalars) {
  Tensor m = Tensor::from_vector<bool>({true, false, true}, {3});
  Tensor r = call_t("aten::bitwise_and.Scalar", {m, true});
  EXPECT_EQ(r.dtype(), DType::boolean);
  EXPECT_EQ(r.to_doubles(), (std::vector<double>{1, 0, 1}));
  Tensor i = call_t("aten::bitwise_and.Scalar", {m, int64_t(3)});  // an int Scalar: i64
  EXPECT_EQ(i.dtype(), DType::i64);
  EXPECT_EQ(i.to_doubles(), (std::vector<double>{1, 0, 1}));
  Tensor x = Tensor::from_vector<int32_t>({12, -1, 5}, {3});
  Tensor o = call_t("aten::bitwise_or.Scalar", {x, int64_t(3)});
  EXPECT_EQ(o.dtype(), DType::i32);  // a dimensioned tensor wins over a Scalar of its category
  EXPECT_EQ(o.to_doubles(), (std::vector<double>{15, -1, 7}));
}

TEST(AtenLogic, BitwiseOpsRefuseFloats) {
  Tensor f = Tensor::empty({2}, DType::f32), m = Tensor::empty({2}, DType::boolean);
  expect_error([&] { call("aten::bitwise_and.Tensor", {f, m}); },
               "aten::bitwise_and.Tensor: self has dtype f32, which is not supported (expected "
               "bool or an integer dtype)");
  expect_error([&] { call("aten::bitwise_xor.Tensor", {m, Tensor::empty({2}, DType::bf16)}); },
               "aten::bitwise_xor.Tensor: other has dtype bf16, which is not supported");
  expect_error([&] { call("aten::bitwise_not", {f}); },
               "aten::bitwise_not: self has dtype f32, which is not supported");
  expect_error([&] { call("aten::bitwise_or.Scalar", {m, 1.5}); },
               "aten::bitwise_or.Scalar: other is the float Scalar 1.5, which is not supported");
}

TEST(AtenLogic, LogicalOrBroadcastsAnyDtypes) {
  Tensor a = small_values({4, 1}, DType::f32, 300, Layout::contiguous);
  Tensor b = small_values({1, 11}, DType::i64, 301, Layout::contiguous);
  Tensor got = call_t("aten::logical_or", {a, b});
  expect_close(got, ref_binary(a, b, {4, 11}, [](double x, double y) {
                 return x != 0 || y != 0 ? 1.0 : 0.0;  // NaN is true
               }), DType::boolean, "logical_or");
  expect_error([&] { call("aten::logical_or", {a, Tensor::empty({3, 1}, DType::boolean)}); },
               "aten::logical_or: self with shape [4, 1] and other with shape [3, 1] do not "
               "broadcast");
}

TEST(AtenLogic, LiftFreshCopyIsAFreshCopy) {
  Tensor x = random_tensor({3, 5}, DType::bf16, 400, Layout::transposed);
  Tensor y = call_t("aten::lift_fresh_copy", {x});
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_TRUE(y.is_contiguous());
  EXPECT_NE(y.storage(), x.storage());
  EXPECT_EQ(y.to_doubles(), x.to_doubles());
}

TEST(AtenLogic, SchemasArePyTorchs) {
  const char* schemas[] = {
      "aten::eq.Tensor(Tensor self, Tensor other) -> Tensor",
      "aten::ne.Scalar(Tensor self, Scalar other) -> Tensor",
      "aten::ge.Tensor(Tensor self, Tensor other) -> Tensor",
      "aten::bitwise_and.Scalar(Tensor self, Scalar other) -> Tensor",
      "aten::bitwise_xor.Tensor(Tensor self, Tensor other) -> Tensor",
      "aten::bitwise_not(Tensor self) -> Tensor",
      "aten::logical_or(Tensor self, Tensor other) -> Tensor",
      "aten::lift_fresh_copy(Tensor self) -> Tensor",
      "aten::index.Tensor(Tensor self, Tensor?[] indices) -> Tensor",
      "aten::index_select(Tensor self, int dim, Tensor index) -> Tensor",
      "aten::gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor",
      "aten::cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor",
  };
  for (const char* s : schemas) {
    FunctionSchema parsed = parse_schema(s);
    const OpDef& op = Registry::global().get(parsed.qualified_name());
    EXPECT_EQ(op.schema().str(), s);
    EXPECT_NE(op.kernel(Backend::cpu), nullptr) << s;
  }
}

}  // namespace
}  // namespace symmflow::test
