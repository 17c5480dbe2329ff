// Half / BFloat16 conversions against an exhaustive reference: every 16-bit pattern round trips,
// and float -> 16 bit picks the nearest representable value with ties to even.
#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "symmflow/core/half.hpp"

namespace symmflow {
namespace {

template <typename H>
std::vector<std::pair<double, uint16_t>> finite_values() {
  std::vector<std::pair<double, uint16_t>> v;
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = H::from_bits(uint16_t(b));
    if (std::isfinite(f) && !(f == 0 && std::signbit(f))) v.emplace_back(double(f), uint16_t(b));
  }
  std::sort(v.begin(), v.end());
  return v;
}

// Nearest finite value, ties to even mantissa; overflow past the rounding edge gives inf.
uint16_t reference_round(float f, const std::vector<std::pair<double, uint16_t>>& table,
                         double overflow_edge, uint16_t inf_bits) {
  double d = std::abs(double(f));
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (d >= overflow_edge) return uint16_t(sign | inf_bits);
  auto it = std::lower_bound(table.begin(), table.end(), std::make_pair(d, uint16_t(0)));
  auto lo = it == table.begin() ? it : it - 1;
  if (it == table.end()) it = lo;
  double dl = d - lo->first, dh = it->first - d;
  uint16_t pick;
  if (it->first == d) pick = it->second;
  else if (dl < dh) pick = lo->second;
  else if (dh < dl) pick = it->second;
  else pick = (lo->second & 1) == 0 ? lo->second : it->second;
  return uint16_t(sign | pick);
}

TEST(Half, EveryPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = Half::from_bits(uint16_t(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(float(Half(f)))) << b;
    } else {
      EXPECT_EQ(Half(f).bits, b) << b;
    }
  }
}

TEST(BFloat16, EveryPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = BFloat16::from_bits(uint16_t(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(float(BFloat16(f)))) << b;
    } else {
      EXPECT_EQ(BFloat16(f).bits, b) << b;
    }
  }
}

TEST(Half, RoundsToNearestEven) {
  auto table = finite_values<Half>();
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    float f = std::bit_cast<float>(bits(rng));
    if (!std::isfinite(f)) continue;
    int exponent = 0;
    f = std::ldexp(std::frexp(f, &exponent), int(rng() % 40) - 30);  // bias towards half's range
    EXPECT_EQ(Half(f).bits, reference_round(f, table, 65520.0, 0x7c00)) << f;
  }
  // Halfway cases between consecutive halves, including subnormals.
  for (size_t i = 0; i + 1 < table.size(); i += 7) {
    float mid = float((table[i].first + table[i + 1].first) / 2);
    EXPECT_EQ(Half(mid).bits, reference_round(mid, table, 65520.0, 0x7c00)) << mid;
  }
  EXPECT_EQ(Half(65519.0f).bits, 0x7bffu);
  EXPECT_EQ(Half(65520.0f).bits, 0x7c00u);
  EXPECT_EQ(Half(-1e10f).bits, 0xfc00u);
  EXPECT_EQ(Half(5.96046448e-08f).bits, 0x0001u);
  EXPECT_EQ(Half(2.98023224e-08f).bits, 0x0000u);  // exactly half the smallest subnormal: even
}

TEST(BFloat16, RoundsToNearestEven) {
  auto table = finite_values<BFloat16>();
  std::mt19937 rng(2);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    float f = std::bit_cast<float>(bits(rng));
    if (!std::isfinite(f) || std::abs(f) > 3.38e38f) continue;
    EXPECT_EQ(BFloat16(f).bits, reference_round(f, table, 3.3961514e38, 0x7f80)) << f;
  }
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80u);
  EXPECT_EQ(BFloat16(1.00390625f).bits, 0x3f80u);  // halfway, rounds to even
  EXPECT_EQ(BFloat16(1.01171875f).bits, 0x3f82u);  // halfway, rounds up to even
}

}  // namespace
}  // namespace symmflow
