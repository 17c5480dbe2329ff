// The reduction loops of kernels/cpu/collectives/reduce.hpp on their own: the branch-free 16-bit
// conversions give exactly core's BFloat16 / Half bits, and the chunked rank-order loop equals a
// scalar reference across chunk boundaries and when dst aliases a source.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "../../src/kernels/cpu/collectives/reduce.hpp"
#include "collectives/workspace.hpp"

namespace symmflow::cpu {
namespace {

TEST(Reduce, HalfToFloatMatchesCoreForEveryPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    ASSERT_EQ(std::bit_cast<uint32_t>(bf16_bits_to_float(uint16_t(b))),
              std::bit_cast<uint32_t>(float(BFloat16::from_bits(uint16_t(b)))))
        << b;
    float want = Half::to_float(uint16_t(b)), got = half_bits_to_float(uint16_t(b));
    if (std::isnan(want)) {
      // Signalling NaNs come back quiet (the conversion multiplies); the payload is kept.
      ASSERT_TRUE(std::isnan(got)) << b;
      ASSERT_EQ(std::bit_cast<uint32_t>(got) | 0x400000u, std::bit_cast<uint32_t>(want) | 0x400000u) << b;
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << b;
  }
}

TEST(Reduce, FloatTo16BitsMatchesCore) {
  // A sweep over float bit patterns (every sign, exponent, rounding case) plus every half and
  // bf16 value and the midpoints next to them.
  std::vector<uint32_t> patterns;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4093) patterns.push_back(uint32_t(u));
  for (uint32_t b = 0; b < 65536; ++b) {
    uint32_t f = std::bit_cast<uint32_t>(Half::to_float(uint16_t(b)));
    for (uint32_t d : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x2000u}) patterns.push_back(f + d);
    uint32_t g = uint32_t(b) << 16;
    for (uint32_t d : {0u, 1u, 0x7fffu, 0x8000u, 0x8001u}) patterns.push_back(g + d);
  }
  for (uint32_t u : patterns) {
    float f = std::bit_cast<float>(u);
    ASSERT_EQ(float_to_half_bits(f), Half(f).bits) << std::hex << u;
    ASSERT_EQ(float_to_bf16_bits(f), BFloat16(f).bits) << std::hex << u;
  }
}

template <typename T>
void check_loop(ReduceOp op, int n_src, int64_t count, bool alias) {
  std::vector<std::vector<T>> src(static_cast<size_t>(n_src), std::vector<T>(static_cast<size_t>(count)));
  for (int p = 0; p < n_src; ++p) {
    for (int64_t i = 0; i < count; ++i) src[size_t(p)][size_t(i)] = T(float(testing::input_value(7, p, i)));
  }
  std::vector<const void*> ptrs;
  for (auto& s : src) ptrs.push_back(s.data());
  std::vector<T> out(static_cast<size_t>(count));
  std::vector<T> expected(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    double v = testing::reduce_ref(std::string(reduce_op_name(op)), dtype_of<T>, n_src,
                                   [&](int p) { return testing::input_value(7, p, i); });
    expected[size_t(i)] = T(float(v));
    if constexpr (std::is_integral_v<T> || std::is_same_v<T, double>) expected[size_t(i)] = T(v);
  }
  void* dst = alias ? static_cast<void*>(src[0].data()) : out.data();
  reduce_fn(dtype_of<T>, op)(ptrs.data(), n_src, dst, count, n_src);
  const T* got = static_cast<const T*>(dst);
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &expected[size_t(i)], sizeof(T)), 0)
        << dtype_name(dtype_of<T>) << " " << reduce_op_name(op) << " n=" << n_src
        << " count=" << count << " i=" << i << " got " << double(got[i]) << " want "
        << double(expected[size_t(i)]);
  }
}

TEST(Reduce, ChunkedLoopEqualsReference) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
    for (int64_t count : {int64_t(0), int64_t(1), int64_t(2047), int64_t(2048), int64_t(5000)}) {
      for (int n : {1, 3, 8}) {
        check_loop<float>(op, n, count, false);
        check_loop<double>(op, n, count, n == 3);
        check_loop<BFloat16>(op, n, count, n == 8);
        check_loop<Half>(op, n, count, false);
        check_loop<int32_t>(op, n, count, true);
        check_loop<int64_t>(op, n, count, false);
      }
    }
  }
}

TEST(Reduce, UnsupportedDtypesHaveNoLoop) {
  EXPECT_EQ(reduce_fn(DType::i8, ReduceOp::sum), nullptr);
  EXPECT_EQ(reduce_fn(DType::u32, ReduceOp::max), nullptr);
  EXPECT_EQ(reduce_fn(DType::boolean, ReduceOp::min), nullptr);
}

}  // namespace
}  // namespace symmflow::cpu
