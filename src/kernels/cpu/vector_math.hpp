// vexp: an exp that compilers vectorize (Note [vector exp]), for the CPU kernels' float loops.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace symmflow::cpu {

// Note [vector exp]: a call of std::exp in a loop is a call per element (glibc's expf, ~3 ns on
// this project's CPUs): the softmax of CPU attention and the sigmoid of SiLU's backward spent more
// time there than in their GEMMs' share. vexp is straight-line float code, inlined and vectorized
// by the compiler at any target (SSE2 and up; its files are built with -fno-trapping-math, which
// lets the clamps be selects: src/CMakeLists.txt): x clamped to [-104, 89] (NaN passes the clamps),
// n = round(x log2 e) by the 1.5 * 2^23 trick (whose bits then hold n: no float-to-int conversion,
// which NaN would make undefined), r = x - n ln 2 in two parts (Cody and Waite), exp(r) by Cephes'
// degree-6 polynomial, and 2^n applied as two normal powers 2^(n/2) 2^(n - n/2) so that results
// down to the subnormals and up to the overflow to inf come out right. Error: at most 2 ulp
// against the correctly rounded exp over the normal range (tests/kernels/vector_math_test.cpp
// checks every float in [-104, 89] at a fixed step, the special values and the subnormals).
// PyTorch's CPU kernels use SLEEF's 1-ulp vector exp for the same reason. Doubles keep std::exp.
inline float vexp(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: t's low bits are round(x log2 e)
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  x = std::max(std::min(x, 89.0f), -104.0f);
  const float t = x * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  return p * std::bit_cast<float>((n1 + 127) << 23) * std::bit_cast<float>((n2 + 127) << 23);
}

inline double vexp(double x) { return std::exp(x); }

// Note [lane reductions]: the max and the sum of a row in 8 interleaved lanes, combined at the
// end, so that the compiler keeps one vector of partial results (a single running max or sum is
// a chain of dependent scalar instructions: in CPU attention's softmax it took half the time of
// the block's two GEMMs). The max ignores NaN as std::max(running, x) does; the sum's rounding
// differs from the sequential sum's by the order only, and is the same for a row whatever else
// the batch holds (Note [batch-invariant products]).
template <typename A>
A lane_max(const A* x, int64_t n, A init) {
  constexpr int kLanes = 8;
  A m[kLanes];
  for (A& v : m) v = init;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) m[k] = std::max(m[k], x[j + k]);
  }
  for (; j < n; ++j) m[0] = std::max(m[0], x[j]);
  A r = m[0];
  for (int k = 1; k < kLanes; ++k) r = std::max(r, m[k]);
  return r;
}

template <typename A>
A lane_sum(const A* x, int64_t n) {
  constexpr int kLanes = 8;
  A s[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) s[k] += x[j + k];
  }
  for (; j < n; ++j) s[0] += x[j];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

}  // namespace symmflow::cpu
