// aten binary pointwise ops (add/sub/mul/div: Tensor, Scalar, out and in-place overloads) against
// naive f64 references: every dtype, broadcast, empty / one-element / odd sizes, non-contiguous
// inputs and outputs, type promotion, and the error texts of bad inputs.
#include "test_util.hpp"

namespace symmflow::test {
namespace {

struct BinaryCase {
  Shape a, b;
  Layout la = Layout::contiguous, lb = Layout::contiguous;
};

const BinaryCase kBinaryCases[] = {
    {{}, {}},
    {{1}, {1}},
    {{0}, {0}},
    {{0, 3}, {3}},
    {{7}, {7}},
    {{1027}, {1027}},
    {{3, 5}, {3, 5}, Layout::transposed, Layout::contiguous},
    {{3, 5}, {3, 5}, Layout::contiguous, Layout::strided},
    {{4, 1, 5}, {3, 1}},
    {{2, 3, 9}, {9}, Layout::strided, Layout::contiguous},
    {{5, 7}, {}},
    {{1}, {6, 4}, Layout::contiguous, Layout::transposed},
};

struct BinaryOpInfo {
  const char* name;
  std::function<double(double, double)> ref;
};

double ref_of(const std::string& name, double a, double b, double alpha) {
  if (name == "add") return a + alpha * b;
  if (name == "sub") return a - alpha * b;
  if (name == "mul") return a * b;
  return a / b;
}

DType result_dtype(const std::string& name, DType t) {
  return name == "div" && !is_floating(t) ? DType::f32 : t;
}

bool supported(const std::string& name, DType t) { return !(name == "sub" && t == DType::boolean); }

std::vector<DType> all_dtypes() { return std::vector<DType>(std::begin(kAllDTypes), std::end(kAllDTypes)); }

// Integer division by zero has no f64 reference worth comparing; keep divisors non-zero.
Tensor nonzero_like(const Tensor& t) {
  Tensor out = t;
  if (t.numel() == 0) return out;
  std::vector<double> v = t.to_doubles();
  std::vector<int64_t> idx;
  for (int64_t n = 0; n < t.numel(); ++n) {
    if (v[size_t(n)] != 0) continue;
    std::vector<int64_t> i = unravel(n, t.shape());
    int64_t off = 0;
    for (size_t d = 0; d < i.size(); ++d) off += i[d] * t.strides()[d];
    store_double(t.view(), off, 1);
  }
  return out;
}

TEST(AtenBinary, TensorTensorEveryDtypeAndShape) {
  for (const char* name : {"add", "sub", "mul", "div"}) {
    for (DType dt : all_dtypes()) {
      if (!supported(name, dt)) continue;
      uint32_t seed = 1;
      for (const BinaryCase& c : kBinaryCases) {
        Tensor a = random_tensor(c.a, dt, seed++, c.la);
        Tensor b = random_tensor(c.b, dt, seed++, c.lb);
        if (std::string(name) == "div") b = nonzero_like(b);
        Shape out = broadcast_shapes(c.a, c.b);
        std::string what = fmt::format("{} {} {}{} {}{}", name, dtype_name(dt), shape_str(c.a),
                                       layout_name(c.la), shape_str(c.b), layout_name(c.lb));
        Tensor got = call_t(fmt::format("aten::{}.Tensor", name), {a, b});
        ASSERT_EQ(got.shape(), out) << what;
        EXPECT_TRUE(got.is_contiguous()) << what;
        DType rd = result_dtype(name, dt);
        std::string n = name;
        expect_close(got, ref_binary(a, b, out, [&](double x, double y) { return ref_of(n, x, y, 1); }),
                     rd, what);
      }
    }
  }
}

TEST(AtenBinary, AlphaScalesOther) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    Tensor a = random_tensor({4, 6}, dt, 3, Layout::transposed);
    Tensor b = random_tensor({6}, dt, 4);
    for (const char* name : {"add", "sub"}) {
      Value alpha = is_floating(dt) ? Value(-1.5) : Value(int64_t(3));
      double al = alpha.to_double();
      Tensor got = call_t(fmt::format("aten::{}.Tensor", name), {a, b}, {{"alpha", alpha}});
      std::string n = name;
      expect_close(got, ref_binary(a, b, {4, 6}, [&](double x, double y) { return ref_of(n, x, y, al); }),
                   dt, fmt::format("{} alpha {}", name, dtype_name(dt)));
    }
  }
}

TEST(AtenBinary, ScalarOverloads) {
  for (const char* name : {"add", "sub", "mul", "div"}) {
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i8, DType::i32,
                     DType::i64, DType::u32}) {
      Tensor a = random_tensor({3, 7}, dt, 9, Layout::strided);
      Value other = is_floating(dt) ? Value(0.75) : Value(int64_t(3));
      Tensor got = call_t(fmt::format("aten::{}.Scalar", name), {a, other});
      Tensor s = Tensor::full({}, DType::f64, other.to_double());
      std::string n = name;
      expect_close(got, ref_binary(a, s, {3, 7}, [&](double x, double y) { return ref_of(n, x, y, 1); }),
                   result_dtype(name, dt), fmt::format("{}.Scalar {}", name, dtype_name(dt)));
    }
  }
}

TEST(AtenBinary, BoolResults) {
  Tensor a = Tensor::from_vector<bool>({true, false, true, false}, {4});
  Tensor b = Tensor::from_vector<bool>({true, true, false, false}, {4});
  EXPECT_EQ(call_t("aten::add.Tensor", {a, b}).to_doubles(), (std::vector<double>{1, 1, 1, 0}));
  EXPECT_EQ(call_t("aten::mul.Tensor", {a, b}).to_doubles(), (std::vector<double>{1, 0, 0, 0}));
  EXPECT_EQ(call_t("aten::add.Tensor", {a, b}).dtype(), DType::boolean);
}

TEST(AtenBinary, IntegerWrapsAround) {
  Tensor a = Tensor::from_vector<int8_t>({120, -120}, {2});
  Tensor b = Tensor::from_vector<int8_t>({10, -10}, {2});
  EXPECT_EQ(call_t("aten::add.Tensor", {a, b}).to_doubles(), (std::vector<double>{-126, 126}));
  Tensor u = Tensor::from_vector<uint32_t>({1}, {1});
  EXPECT_EQ(call_t("aten::sub.Scalar", {u, int64_t(2)}).to_doubles(),
            (std::vector<double>{4294967295.0}));
}

TEST(AtenBinary, TypePromotion) {
  Tensor i32 = random_tensor({3}, DType::i32, 1);
  Tensor f16 = random_tensor({3}, DType::f16, 2);
  Tensor f32 = random_tensor({3}, DType::f32, 3);
  Tensor bf16 = random_tensor({3}, DType::bf16, 4);
  Tensor f64_0d = random_tensor({}, DType::f64, 5);
  Tensor i64_0d = random_tensor({}, DType::i64, 6);
  Tensor bools = random_tensor({3}, DType::boolean, 7);
  auto dt = [](const Value& a, const Value& b) { return call("aten::add", {a, b}).to_tensor().dtype(); };
  EXPECT_EQ(dt(i32, f16), DType::f16);
  EXPECT_EQ(dt(f16, bf16), DType::f32);
  EXPECT_EQ(dt(f16, f64_0d), DType::f16);   // a 0-dim tensor of the same category does not win
  EXPECT_EQ(dt(i32, f64_0d), DType::f64);   // ... but a higher category does
  EXPECT_EQ(dt(i32, i64_0d), DType::i32);
  EXPECT_EQ(dt(i32, 2.5), DType::f32);      // integral tensor with a floating Scalar
  EXPECT_EQ(dt(f16, 2.5), DType::f16);
  EXPECT_EQ(dt(bools, int64_t(2)), DType::i64);
  EXPECT_EQ(dt(bools, true), DType::boolean);
  EXPECT_EQ(dt(f32, i32), DType::f32);
  EXPECT_EQ(call_t("aten::div.Tensor", {i32, i32}).dtype(), DType::f32);
  // Mixed dtypes compute in the promoted type.
  Tensor got = call_t("aten::mul.Tensor", {i32, f64_0d});
  expect_close(got, ref_binary(i32, f64_0d, {3}, [](double x, double y) { return x * y; }),
               DType::f64, "i32 * f64 0-dim");
  Tensor half = call_t("aten::add.Tensor", {f16, bf16});
  expect_close(half, ref_binary(f16, bf16, {3}, [](double x, double y) { return x + y; }),
               DType::f32, "f16 + bf16");
}

TEST(AtenBinary, OutVariantWritesOnlyOut) {
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i32}) {
    for (const char* name : {"add", "sub", "mul", "div"}) {
      Tensor a = random_tensor({3, 5}, dt, 11, Layout::transposed);
      Tensor b = nonzero_like(random_tensor({5}, dt, 12));
      DType rd = result_dtype(name, dt);
      Tensor out = strided_out({3, 5}, rd);
      Value r = call(fmt::format("aten::{}.out", name), {a, b}, {{"out", out}});
      EXPECT_TRUE(r.is_none());
      std::string n = name;
      expect_close(out, ref_binary(a, b, {3, 5}, [&](double x, double y) { return ref_of(n, x, y, 1); }),
                   rd, fmt::format("{}.out {}", name, dtype_name(dt)));
      expect_untouched(out, 77, name);
    }
  }
}

TEST(AtenBinary, OutVariantCastsToAWiderOut) {
  Tensor a = random_tensor({4}, DType::i32, 1);
  Tensor b = random_tensor({4}, DType::i32, 2);
  Tensor out = Tensor::empty({4}, DType::f64);
  call("aten::add.out", {a, b}, {{"out", out}});
  expect_close(out, ref_binary(a, b, {4}, [](double x, double y) { return x + y; }), DType::f64,
               "i32 + i32 into f64");
}

TEST(AtenBinary, InPlaceWritesOnlySelf) {
  for (DType dt : {DType::f32, DType::f16, DType::f64, DType::i64, DType::u32}) {
    for (const char* name : {"add", "sub", "mul", "div"}) {
      if (std::string(name) == "div" && !is_floating(dt)) continue;  // f32 result can't go to ints
      Tensor self = strided_out({3, 5}, dt);
      fill_random(self, 21);
      Tensor before = Tensor::empty({3, 5}, dt);
      std::vector<double> sv = self.to_doubles();
      for (size_t i = 0; i < sv.size(); ++i) store_double(before.view(), int64_t(i), sv[i]);
      Tensor b = nonzero_like(random_tensor({3, 1}, dt, 22));
      call(fmt::format("aten::{}_.Tensor", name), {self, b});
      std::string n = name;
      expect_close(self, ref_binary(before, b, {3, 5}, [&](double x, double y) { return ref_of(n, x, y, 1); }),
                   dt, fmt::format("{}_ {}", name, dtype_name(dt)));
      expect_untouched(self, 77, name);
    }
  }
}

TEST(AtenBinary, InPlaceOnContiguousSelfAliasesNothingElse) {
  Tensor self = random_tensor({1000}, DType::f32, 1);
  std::vector<double> before = self.to_doubles();
  void* data = self.raw_data();
  call("aten::mul_.Tensor", {self, self});
  EXPECT_EQ(self.raw_data(), data);
  std::vector<double> got = self.to_doubles();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_FLOAT_EQ(got[i], float(before[i] * before[i]));
}

TEST(AtenBinary, Errors) {
  Tensor a = random_tensor({2, 3}, DType::f32, 1);
  Tensor b = random_tensor({4}, DType::f32, 2);
  expect_error([&] { call("aten::add.Tensor", {a, b}); },
               "aten::add.Tensor: self with shape [2, 3] and other with shape [4] do not broadcast");
  expect_error([&] { call("aten::add.out", {a, a}, {{"out", Tensor::empty({3}, DType::f32)}}); },
               "aten::add.out: out has shape [3] but the result has shape [2, 3]");
  expect_error([&] { call("aten::add.out", {a, a}, {{"out", Tensor::empty({2, 3}, DType::i32)}}); },
               "aten::add.out: result type f32 can't be cast to the dtype i32 of out");
  expect_error([&] { call("aten::add_.Tensor", {random_tensor({3}, DType::f32, 3), a}); },
               "aten::add_.Tensor: self has shape [3] but the result has shape [2, 3]");
  Tensor bools = random_tensor({3}, DType::boolean, 4);
  expect_error([&] { call("aten::sub.Tensor", {bools, bools}); },
               "aten::sub.Tensor: subtraction with a bool tensor");
  Tensor ints = random_tensor({3}, DType::i32, 5);
  expect_error([&] { call("aten::add.Tensor", {ints, ints}, {{"alpha", 0.5}}); },
               "aten::add.Tensor: for integral input tensors, argument alpha must not be a floating "
               "point number");
  expect_error([&] { call("aten::div_.Tensor", {ints, ints}); },
               "aten::div_.Tensor: result type f32 can't be cast to the dtype i32 of self");
}

}  // namespace
}  // namespace symmflow::test
