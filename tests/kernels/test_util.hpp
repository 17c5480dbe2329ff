// Helpers of the aten kernel tests: seeded random tensors in several layouts (built with core
// functions only, never with the kernels under test), naive f64 references over broadcast
// indices, per-dtype tolerances, and checks that compare every element and assert error text.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "symmflow/core/tensor.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/call.hpp"

namespace symmflow::test {

inline const DType kFloatTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};
inline const DType kIntTypes[] = {DType::i8, DType::i32, DType::i64, DType::u32};

// How a test input is laid out in memory.
enum class Layout {
  contiguous,
  transposed,  // last two dims swapped in memory (rank >= 2)
  strided,     // last dim every other element, starting one element in (unaligned)
};

inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::transposed: return "transposed";
    case Layout::strided: return "strided";
  }
  return "?";
}

// A value that `dtype` holds exactly-ish and that keeps results small.
inline double random_value(std::mt19937& rng, DType dtype) {
  switch (dtype) {
    case DType::boolean: return double(rng() % 2);
    case DType::i8: return double(int(rng() % 21) - 10);
    case DType::u32: return double(rng() % 100);
    case DType::i32:
    case DType::i64: return double(int(rng() % 201) - 100);
    default: return std::uniform_real_distribution<double>(-2.0, 2.0)(rng);
  }
}

// Writes next() into each element of `t` (any layout), in row-major index order; returns t.
inline Tensor fill_each(Tensor t, const std::function<double()>& next) {
  const Shape& shape = t.shape();
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
    store_double(t.view(), off, next());
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return t;
}

// Fills every element of a (possibly strided) tensor through core's store_double.
inline void fill_random(const Tensor& t, uint32_t seed) {
  std::mt19937 rng(seed);
  fill_each(t, [&] { return random_value(rng, t.dtype()); });
}

// A random tensor of `shape` laid out as `layout`, with its storage larger than needed for the
// non-contiguous layouts.
inline Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed,
                            Layout layout = Layout::contiguous) {
  if (layout == Layout::transposed && shape.size() >= 2) {
    Shape base = shape;
    std::swap(base[base.size() - 1], base[base.size() - 2]);
    Tensor b = Tensor::empty(base, dtype);
    Strides s = b.strides();
    std::swap(s[s.size() - 1], s[s.size() - 2]);
    Tensor t = b.as_strided(shape, s, 0);
    fill_random(t, seed);
    return t;
  }
  if (layout == Layout::strided && !shape.empty()) {
    Shape base = shape;
    base.back() = 2 * shape.back() + 1;
    Tensor b = Tensor::full(base, dtype, 55);  // sentinel in the gaps
    Strides s = b.strides();
    s.back() = 2;
    Tensor t = b.as_strided(shape, s, 1);
    fill_random(t, seed);
    return t;
  }
  Tensor t = Tensor::empty(shape, dtype);
  fill_random(t, seed);
  return t;
}

// Row-major multi-index helpers for references.
inline std::vector<int64_t> unravel(int64_t linear, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    int64_t s = std::max<int64_t>(shape[d], 1);
    idx[d] = linear % s;
    linear /= s;
  }
  return idx;
}

// Linear row-major index into `shape` of an index of the broadcast shape `out`.
inline int64_t broadcast_index(const std::vector<int64_t>& out_idx, const Shape& shape) {
  size_t lead = out_idx.size() - shape.size();
  int64_t lin = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    lin = lin * shape[d] + (shape[d] == 1 ? 0 : out_idx[lead + d]);
  }
  return lin;
}

inline std::vector<double> ref_binary(const Tensor& a, const Tensor& b, const Shape& out,
                                      const std::function<double(double, double)>& f) {
  std::vector<double> av = a.to_doubles(), bv = b.to_doubles(), r(size_t(numel(out)));
  for (size_t i = 0; i < r.size(); ++i) {
    std::vector<int64_t> idx = unravel(int64_t(i), out);
    r[i] = f(av[size_t(broadcast_index(idx, a.shape()))], bv[size_t(broadcast_index(idx, b.shape()))]);
  }
  return r;
}

struct Tolerance {
  double rtol;
  double atol;
};

inline Tolerance tolerance(DType t) {
  switch (t) {
    case DType::f32: return {1e-5, 1e-6};
    case DType::f64: return {1e-12, 1e-13};
    case DType::bf16: return {1e-2, 1e-2};
    case DType::f16: return {1e-3, 1e-3};
    default: return {0, 0};  // exact
  }
}

// What storing `v` into `dtype` gives for integral types (truncation, wrap) and bool.
inline double as_stored(double v, DType dtype) {
  switch (dtype) {
    case DType::boolean: return v != 0 ? 1 : 0;
    case DType::i8: return double(int8_t(int64_t(v)));
    case DType::i32: return double(int32_t(int64_t(v)));
    case DType::u32: return double(uint32_t(int64_t(v)));
    case DType::i64: return double(int64_t(v));
    case DType::f32: return double(float(v));  // rounds, overflows to inf like the kernel
    case DType::f16: return double(float(Half(float(v))));
    case DType::bf16: return double(float(BFloat16(float(v))));
    default: return v;
  }
}

// Compares every element of `got` with the reference; `scale[i]` (default |want|) sets the size
// of the quantities combined into element i, for sums and products.
inline void expect_close(const Tensor& got, const std::vector<double>& want, DType dtype,
                         const std::string& what, const std::vector<double>& scale = {}) {
  ASSERT_EQ(got.dtype(), dtype) << what;
  std::vector<double> g = got.to_doubles();
  ASSERT_EQ(g.size(), want.size()) << what;
  Tolerance tol = tolerance(dtype);
  int failures = 0;
  for (size_t i = 0; i < g.size() && failures < 5; ++i) {
    double w = as_stored(want[i], dtype);
    if (std::isnan(w)) {
      if (!std::isnan(g[i])) {
        ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected NaN";
        ++failures;
      }
      continue;
    }
    if (std::isinf(w) && g[i] == w) continue;
    double s = scale.empty() ? std::abs(w) : std::max(scale[i], std::abs(w));
    double bound = tol.atol * std::max(1.0, s) + tol.rtol * s;
    if (!(std::abs(g[i] - w) <= bound)) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected " << w
                    << " (tolerance " << bound << ")";
      ++failures;
    }
  }
}

// Runs `fn`, expecting a symmflow::Error whose message contains `text`.
template <typename F>
void expect_error(F&& fn, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos)
        << "error was: " << e.what() << "\nexpected it to contain: " << text;
  }
}

inline Tensor call_t(std::string_view op, const std::vector<Value>& args, const KwArgs& kw = {}) {
  return call(op, args, kw).to_tensor();
}

// Every byte of `t`'s storage, to check that out/in-place variants touch nothing else.
inline std::vector<uint8_t> storage_bytes(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.storage()->data());
  return std::vector<uint8_t>(p, p + t.storage()->bytes());
}

// A tensor of `shape` inside a larger sentinel-filled buffer (every other element, one element in).
inline Tensor strided_out(const Shape& shape, DType dtype, double sentinel = 77) {
  Shape base = shape.empty() ? Shape{3} : shape;
  base.back() = 2 * (shape.empty() ? 1 : shape.back()) + 1;
  Tensor b = Tensor::full(base, dtype, sentinel);
  if (shape.empty()) return b.as_strided({}, {}, 1);
  Strides s = b.strides();
  s.back() = 2;
  return b.as_strided(shape, s, 1);
}

// The elements of `t`'s storage that `t` does not cover, as doubles (checks sentinels).
inline std::vector<double> uncovered(const Tensor& t) {
  int64_t total = int64_t(t.storage()->bytes() / dtype_size(t.dtype()));
  std::vector<bool> covered(size_t(total), false);
  int64_t base = int64_t(t.offset_bytes() / dtype_size(t.dtype()));
  for (int64_t n = 0; n < t.numel(); ++n) {
    std::vector<int64_t> idx = unravel(n, t.shape());
    int64_t off = base;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
    covered[size_t(off)] = true;
  }
  std::vector<double> rest;
  TensorView whole{t.storage()->data(), t.dtype(), {total}, {1}, t.device(), t.storage().get()};
  for (int64_t i = 0; i < total; ++i) {
    if (!covered[size_t(i)]) rest.push_back(load_double(whole, i));
  }
  return rest;
}

inline void expect_untouched(const Tensor& t, double sentinel, const std::string& what) {
  for (double v : uncovered(t)) {
    ASSERT_EQ(v, as_stored(sentinel, t.dtype())) << what << ": an element outside the output changed";
  }
}

}  // namespace symmflow::test
