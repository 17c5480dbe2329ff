// aten unary pointwise ops (sin, cos, exp, tanh, relu, gelu both approximations, silu, sigmoid,
// neg, reciprocal; functional, out and in-place) against f64 references over every supported dtype, empty /
// one-element / odd / non-contiguous inputs; ints promote to f32 where PyTorch does.
#include <numbers>

#include "test_util.hpp"

namespace symmflow::test {
namespace {

double ref_unary(const std::string& op, double x) {
  if (op == "sin") return std::sin(x);
  if (op == "cos") return std::cos(x);
  if (op == "exp") return std::exp(x);
  if (op == "tanh") return std::tanh(x);
  if (op == "relu") return x < 0 ? 0 : x;
  if (op == "gelu") return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2));
  if (op == "gelu_tanh") {
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
  }
  if (op == "silu") return x / (1 + std::exp(-x));
  if (op == "sigmoid") return 1 / (1 + std::exp(-x));
  if (op == "reciprocal") return 1 / x;
  return -x;  // neg
}

std::vector<double> ref_all(const std::string& op, const Tensor& t) {
  std::vector<double> v = t.to_doubles();
  for (double& x : v) x = ref_unary(op, x);
  return v;
}

const char* kOps[] = {"sin",  "cos",     "exp", "tanh",      "relu",
                      "gelu", "silu",    "sigmoid", "neg", "reciprocal"};
const char* kFloatOnly[] = {"gelu", "silu"};
const char* kIntToFloat[] = {"sin", "cos", "exp", "tanh", "sigmoid", "reciprocal"};

bool contains(const auto& list, const std::string& s) {
  for (const char* x : list) {
    if (s == x) return true;
  }
  return false;
}

struct UnaryCase {
  Shape shape;
  Layout layout;
};
const UnaryCase kCases[] = {{{}, Layout::contiguous},     {{0}, Layout::contiguous},
                            {{1}, Layout::contiguous},    {{37}, Layout::contiguous},
                            {{3, 5}, Layout::transposed}, {{2, 3, 4}, Layout::strided},
                            {{1031}, Layout::strided}};

TEST(AtenUnary, EveryOpDtypeAndShape) {
  for (const char* op : kOps) {
    for (DType dt : kAllDTypes) {
      bool ok = is_floating(dt) || (!contains(kFloatOnly, op) && dt != DType::boolean) ||
                (dt == DType::boolean && contains(kIntToFloat, op));
      if (!ok) continue;
      DType rd = !is_floating(dt) && contains(kIntToFloat, op) ? DType::f32 : dt;
      uint32_t seed = 100;
      for (const UnaryCase& c : kCases) {
        Tensor x = random_tensor(c.shape, dt, seed++, c.layout);
        std::string what = fmt::format("{} {} {} {}", op, dtype_name(dt), shape_str(c.shape),
                                       layout_name(c.layout));
        Tensor got = call_t(fmt::format("aten::{}", op), {x});
        ASSERT_EQ(got.shape(), c.shape) << what;
        expect_close(got, ref_all(op, x), rd, what);
      }
    }
  }
}

TEST(AtenUnary, GeluTanhApproximation) {
  for (DType dt : kFloatTypes) {
    Tensor x = random_tensor({5, 9}, dt, 7, Layout::transposed);
    expect_close(call_t("aten::gelu", {x}, {{"approximate", "tanh"}}), ref_all("gelu_tanh", x), dt,
                 fmt::format("gelu tanh {}", dtype_name(dt)));
  }
}

TEST(AtenUnary, NanAndInfinity) {
  Tensor x = Tensor::from_vector<float>({NAN, INFINITY, -INFINITY, -0.0f}, {4});
  std::vector<double> r = call_t("aten::relu", {x}).to_doubles();
  EXPECT_TRUE(std::isnan(r[0]));
  EXPECT_EQ(r[1], INFINITY);
  EXPECT_EQ(r[2], 0);
  std::vector<double> s = call_t("aten::sigmoid", {x}).to_doubles();
  EXPECT_EQ(s[1], 1);
  EXPECT_EQ(s[2], 0);
}

TEST(AtenUnary, OutAndInPlaceWriteOnlyTheirTensor) {
  for (const char* op : kOps) {
    for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::f16}) {
      std::string what = fmt::format("{} {}", op, dtype_name(dt));
      Tensor x = random_tensor({4, 3}, dt, 5, Layout::transposed);
      if (std::string(op) != "relu") {  // PyTorch has no relu.out
        Tensor out = strided_out({4, 3}, dt);
        EXPECT_TRUE(call(fmt::format("aten::{}.out", op), {x}, {{"out", out}}).is_none());
        expect_close(out, ref_all(op, x), dt, what + ".out");
        expect_untouched(out, 77, what + ".out");
      }
      Tensor self = strided_out({4, 3}, dt);
      fill_random(self, 6);
      std::vector<double> want = ref_all(op, self);
      EXPECT_TRUE(call(fmt::format("aten::{}_", op), {self}).is_none());
      expect_close(self, want, dt, what + "_");
      expect_untouched(self, 77, what + "_");
    }
  }
}

TEST(AtenUnary, IntegerOpsStayIntegral) {
  Tensor x = Tensor::from_vector<int32_t>({-3, 0, 5}, {3});
  EXPECT_EQ(call_t("aten::relu", {x}).to_doubles(), (std::vector<double>{0, 0, 5}));
  EXPECT_EQ(call_t("aten::neg", {x}).to_doubles(), (std::vector<double>{3, 0, -5}));
  EXPECT_EQ(call_t("aten::neg", {x}).dtype(), DType::i32);
  EXPECT_EQ(call_t("aten::exp", {x}).dtype(), DType::f32);
  Tensor out = Tensor::empty({3}, DType::f64);
  call("aten::sin.out", {x}, {{"out", out}});
  // Computed in the result type f32, then stored as f64 (as PyTorch does).
  std::vector<double> got = out.to_doubles(), want = ref_all("sin", x);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
}

// reciprocal of integers and bool is f32, as torch.reciprocal(torch.tensor([2])) is 0.5; 1 / 0 is
// inf (also for False), -1 / 0 of -0.0 is -inf; an f64 result of an i64 input through .out.
TEST(AtenUnary, ReciprocalPromotesIntegers) {
  Tensor i = Tensor::from_vector<int64_t>({2, -4, 0, 1}, {4});
  Tensor r = call_t("aten::reciprocal", {i});
  EXPECT_EQ(r.dtype(), DType::f32);
  EXPECT_EQ(r.to_doubles(), (std::vector<double>{0.5, -0.25, INFINITY, 1}));
  Tensor b = Tensor::from_vector<bool>({true, false}, {2});
  EXPECT_EQ(call_t("aten::reciprocal", {b}).to_doubles(), (std::vector<double>{1, INFINITY}));
  Tensor z = Tensor::from_vector<float>({-0.0f, NAN}, {2});
  std::vector<double> rz = call_t("aten::reciprocal", {z}).to_doubles();
  EXPECT_EQ(rz[0], -INFINITY);
  EXPECT_TRUE(std::isnan(rz[1]));
  Tensor out = Tensor::empty({4}, DType::f64);
  EXPECT_TRUE(call("aten::reciprocal.out", {i}, {{"out", out}}).is_none());
  EXPECT_EQ(out.to_doubles(), (std::vector<double>{0.5, -0.25, INFINITY, 1}));
  expect_error([&] { call("aten::reciprocal_", {i}); },
               "aten::reciprocal_: result type f32 can't be cast to the dtype i64 of self");
}

TEST(AtenUnary, Errors) {
  Tensor ints = random_tensor({3}, DType::i32, 1);
  expect_error([&] { call("aten::gelu", {ints}); },
               "aten::gelu: self has dtype i32, which is not supported (expected f32, f64, bf16 or "
               "f16)");
  expect_error([&] { call("aten::silu", {ints}); }, "aten::silu: self has dtype i32");
  Tensor f = random_tensor({3}, DType::f32, 2);
  expect_error([&] { call("aten::gelu", {f}, {{"approximate", "fast"}}); },
               "aten::gelu: approximate must be 'none' or 'tanh', got 'fast'");
  expect_error([&] { call("aten::neg", {random_tensor({2}, DType::boolean, 3)}); },
               "aten::neg: negation of a bool tensor is not supported");
  expect_error([&] { call("aten::relu", {random_tensor({2}, DType::boolean, 3)}); },
               "aten::relu: self has dtype bool, which is not supported");
  expect_error([&] { call("aten::sin_", {ints}); },
               "aten::sin_: result type f32 can't be cast to the dtype i32 of self");
  expect_error([&] { call("aten::exp.out", {f}, {{"out", Tensor::empty({4}, DType::f32)}}); },
               "aten::exp.out: out has shape [4] but the result has shape [3]");
}

}  // namespace
}  // namespace symmflow::test
