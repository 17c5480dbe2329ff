// vexp (Note [vector exp]) against the correctly rounded exp: every 4099th float of [-104, 89] within
// 1 ulp where the result is normal, within 1 ulp of the subnormal spacing below, the special values
// exact; and the kernels that use it (aten::exp, sigmoid, silu), vectorized, on a tensor whose
// lanes mix specials with ordinary values, each element within 2 ulp of the formula around the
// correctly rounded exp; lane_max and lane_sum against the running max and the exact sum.
#include <cmath>
#include <cstring>
#include <limits>

#include "src/kernels/cpu/vector_math.hpp"
#include "test_util.hpp"

namespace symmflow::test {
namespace {

using symmflow::cpu::lane_max;
using symmflow::cpu::lane_sum;
using symmflow::cpu::vexp;

int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::llabs(int64_t(ia) - int64_t(ib));
}

// Whether got is exp(x) within 1 ulp (normal results) or 1 subnormal step (tiny ones).
::testing::AssertionResult near_exp(float x, float got) {
  const float want = float(std::exp(double(x)));
  if (std::isnan(want) ? std::isnan(got) : (got == want || ulps(got, want) <= 1)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "exp(" << x << ") = " << want << ", got " << got << " ("
                                       << ulps(got, want) << " ulp)";
}

TEST(VectorExp, WithinOneUlpOverTheRange) {
  int64_t checked = 0;
  for (float x = -104.0f; x < 89.0f;) {
    ASSERT_TRUE(near_exp(x, vexp(x)));
    ++checked;
    int32_t bits;
    std::memcpy(&bits, &x, 4);
    bits += x < 0 ? -4099 : 4099;  // the next float 4099 representable values on
    if (x < 0 && bits < int32_t(0x80000000u) + 4099) bits = 0;  // past -0: start at +0
    std::memcpy(&x, &bits, 4);
  }
  EXPECT_GT(checked, 500000);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(vexp(0.0f), 1.0f);
  EXPECT_EQ(vexp(-0.0f), 1.0f);
  EXPECT_EQ(vexp(inf), inf);
  EXPECT_EQ(vexp(89.0f), inf);
  EXPECT_EQ(vexp(1e30f), inf);
  EXPECT_EQ(vexp(-inf), 0.0f);
  EXPECT_EQ(vexp(-1e30f), 0.0f);
  EXPECT_TRUE(std::isnan(vexp(std::nanf(""))));
  EXPECT_TRUE(near_exp(88.72283f, vexp(88.72283f)));  // the largest finite result
  EXPECT_TRUE(near_exp(-103.9f, vexp(-103.9f)));            // the smallest subnormals
  EXPECT_EQ(vexp(0.5), std::exp(0.5));                       // doubles are std::exp's
}

// Note [lane reductions]: the max of 8 lanes equals the running std::max (NaN ignored after the
// initial value, -inf rows stay -inf) at every length, remainders included; the sum is within a
// few ulp of the exact sum and exact where every partial sum is representable.
TEST(LaneReductions, EqualTheRunningMaxAndTheSum) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  std::vector<float> x(77);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 37) % 101) - 50.0f;
  x[13] = nan;
  x[40] = 60.5f;
  for (int64_t n : {0, 1, 7, 8, 9, 16, 41, 77}) {
    float running = -inf;
    for (int64_t j = 0; j < n; ++j) running = std::max(running, x[size_t(j)]);
    EXPECT_EQ(lane_max(x.data(), n, -inf), running) << "n " << n;
  }
  std::vector<float> all_inf(11, -inf);
  EXPECT_EQ(lane_max(all_inf.data(), 11, -inf), -inf);
  std::vector<float> ints(77);
  double exact = 0;
  for (size_t i = 0; i < ints.size(); ++i) exact += (ints[i] = float(int(i % 13) - 6));
  EXPECT_EQ(double(lane_sum(ints.data(), 77)), exact);
  EXPECT_EQ(lane_sum(ints.data(), 0), 0.0f);
  std::vector<float> r(1000);
  double want = 0;
  for (size_t i = 0; i < r.size(); ++i) want += (r[i] = 1.0f / float(i + 3));
  EXPECT_NEAR(double(lane_sum(r.data(), 1000)), want, 4 * want * 6e-8);
}

TEST(VectorExp, KernelsMatchTheReferenceInEveryLane) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  Tensor x = random_tensor({1031}, DType::f32, 3);
  const float specials[] = {inf, -inf, nan, 0.0f, -0.0f, 88.8f, -88.0f, -103.5f, 120.0f, -120.0f};
  for (size_t k = 0; k < std::size(specials); ++k) x.data<float>()[k * 97 + k % 4] = specials[k];
  const std::vector<double> xs = x.to_doubles();
  auto check = [&](const char* op, auto ref) {
    const std::vector<double> got = call_t(fmt::format("aten::{}", op), {x}).to_doubles();
    for (size_t i = 0; i < xs.size(); ++i) {
      const float want = ref(float(xs[i]));
      const float g = float(got[i]);
      EXPECT_TRUE(std::isnan(want) ? std::isnan(g) : g == want || ulps(g, want) <= 2)
          << op << "(" << xs[i] << ") = " << want << ", got " << g;
    }
  };
  // The kernels' formulas in float around the correctly rounded exp (an exp(-x) that overflows
  // makes silu -0 in both).
  auto exp_f = [](float v) { return float(std::exp(double(v))); };
  check("exp", [&](float v) { return exp_f(v); });
  check("sigmoid", [&](float v) { return 1.0f / (1.0f + exp_f(-v)); });
  check("silu", [&](float v) { return v / (1.0f + exp_f(-v)); });
}

}  // namespace
}  // namespace symmflow::test
