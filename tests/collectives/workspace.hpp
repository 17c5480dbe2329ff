// Test support for the collective cases: deterministic per-rank inputs, reference values, and a
// symmetric Workspace that carves tensors at unaligned offsets with guard bytes around them.
//
// Contract: everything here needs only the current Runtime (threads or MPI), so the per-rank case
// functions of cases.hpp run unchanged under any transport. Failures throw std::runtime_error
// with what differed, on which rank and where (so a failing rank poisons its peers instead of
// leaving them waiting); no GoogleTest macros.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "symmflow/core/tensor.hpp"
#include "symmflow/runtime/heap.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "support/scoped_tunables.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::testing {

inline constexpr uint8_t kGuardByte = 0xA5;
inline constexpr int kTestChannel = 1;  // test barriers; collectives use channel 0

[[noreturn]] inline void fail(const std::string& what) { throw std::runtime_error(what); }

inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Input element i of `rank`: an integer in [-15, 15], exact in every dtype and in every sum of
// up to 8 ranks, so reductions have one right answer whatever the order of evaluation inside.
inline double input_value(uint64_t seed, int rank, int64_t i) {
  return double(int64_t(mix(seed * 0x100000001B3ull ^ (uint64_t(rank) << 40) ^ uint64_t(i)) % 31) - 15);
}

// Waits for up to 8 ranks sharing 2 cores: spin briefly, then back off.
inline Tunables oversubscribed_tunables() {
  Tunables t = tunables();
  t.spin_count = 256;
  t.yield_count = 16;
  t.sleep_us = 20;
  return t;
}

inline int64_t dtype_bytes(DType t) { return int64_t(dtype_size(t)); }

// Fills a contiguous tensor from f(i).
template <typename F>
void fill(const Tensor& t, F&& f) {
  TensorView v = t.view();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) store_double(v, i, f(i));
}

// Reference of reduce_op over W values given by value(p), in rank order, in double; avg divides
// (integer division for integer dtypes), and the result is rounded by the caller's store.
template <typename F>
double reduce_ref(const std::string& op, DType dtype, int w, F&& value) {
  double acc = value(0);
  for (int p = 1; p < w; ++p) {
    double v = value(p);
    if (op == "max") acc = acc < v ? v : acc;
    else if (op == "min") acc = v < acc ? v : acc;
    else acc += v;
  }
  if (op == "avg") {
    if (is_integral(dtype)) return double(int64_t(acc) / int64_t(w));
    return acc / w;
  }
  return acc;
}

inline uint64_t hash_bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Compares `result` bit for bit with expected(i) rounded to its dtype (every element, row-major).
template <typename F>
void expect_values(const Tensor& result, F&& expected, const std::string& where) {
  if (result.numel() == 0) return;  // nothing to compare (and no memory to point at)
  Tensor want = Tensor::empty(result.shape(), result.dtype());
  fill(want, expected);
  Tensor got = result.contiguous();
  size_t elem = dtype_size(result.dtype());
  if (std::memcmp(got.raw_data(), want.raw_data(), result.nbytes()) == 0) return;
  const char* g = static_cast<const char*>(got.raw_data());
  const char* w = static_cast<const char*>(want.raw_data());
  for (int64_t i = 0; i < result.numel(); ++i) {
    if (std::memcmp(g + size_t(i) * elem, w + size_t(i) * elem, elem) != 0) {
      fail(fmt::format("{}: element {} of {} is {} but should be {}", where, i, result.str(),
                       load_double(got.view(), i), load_double(want.view(), i)));
    }
  }
}

// Every rank of `group` must hold the same bytes in `t`.
inline void expect_same_on_every_rank(Group& group, const Tensor& t, const std::string& where) {
  std::vector<std::string> all = group.allgather(std::to_string(hash_bytes(t)), "test");
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] != all[0]) fail(fmt::format("{}: rank {} and rank 0 differ", where, r));
  }
}

// A local tensor of `shape`, strided (every other element of a larger buffer) when asked; the
// gaps hold a sentinel that check_gaps verifies.
struct LocalOut {
  Tensor base, t;
  static LocalOut make(const Shape& shape, DType dtype, bool strided) {
    LocalOut o;
    if (!strided || shape.empty()) {
      o.t = o.base = Tensor::empty(shape, dtype);
      return o;
    }
    Shape big = shape;
    big.back() *= 2;
    o.base = Tensor::empty(big, dtype);
    fill(o.base, [](int64_t) { return 77.0; });
    Strides s = contiguous_strides(big);
    s.back() = 2;
    o.t = o.base.as_strided(shape, s, 1);
    return o;
  }
  void check_gaps(const std::string& where) const {
    if (base.raw_data() == t.raw_data() && t.is_contiguous()) return;
    for (int64_t i = 0; i < base.numel(); i += 2) {
      if (load_double(base.view(), i) != 77.0)
        fail(fmt::format("{}: strided output wrote outside its elements (at {})", where, i));
    }
  }
};

// Symmetric tensors carved from one heap per workspace, at offsets that are not 16-byte aligned,
// separated by guard bytes that every case checks afterwards. The heap grows (a collective
// allocation) only when a case needs more, and every rank runs the same cases, so ranks agree.
class Workspace {
 public:
  Workspace(Runtime& rt, std::string group) : rt_(rt), group_(std::move(group)) {}
  Group& group() const { return *rt_.group(group_); }
  const std::string& name() const { return group_; }

  // Starts a case whose symmetric tensors need at most `bytes` in total, `count` tensors.
  void begin(size_t bytes, int count, uint64_t salt) {
    size_t need = bytes + size_t(count + 1) * (kGap + 64);
    if (!heap_ || heap_->bytes() < need) {
      heap_.reset();
      heap_ = SymmetricHeap::allocate(rt_.group(group_), std::max<size_t>(need, 4096), "test");
    }
    used_ = need;
    std::memset(heap_->local(), kGuardByte, used_);
    carved_.clear();
    cursor_ = 0;
    salt_ = salt;
  }
  // A contiguous symmetric tensor after a guard gap, at an offset that is a multiple of the
  // element size but (mostly) not of 16.
  Tensor carve(const Shape& shape, DType dtype) {
    size_t elem = dtype_size(dtype);
    size_t offset = cursor_ + kGap + elem * size_t(1 + (salt_ + carved_.size()) % 7);
    offset = (offset + elem - 1) / elem * elem;
    size_t bytes = size_t(numel(shape)) * elem;
    if (offset + bytes + kGap > used_) fail("test workspace too small");
    carved_.push_back({offset, bytes});
    cursor_ = offset + bytes;
    return symmetric_tensor(heap_, offset, shape, dtype);
  }
  // Every byte of the used heap outside the carved tensors still holds the guard pattern.
  void check_guards(const std::string& where) const {
    const auto* p = static_cast<const uint8_t*>(heap_->local());
    size_t next = 0;
    for (const auto& [off, bytes] : carved_) {
      for (size_t i = next; i < off; ++i) {
        if (p[i] != kGuardByte) fail(fmt::format("{}: guard byte {} overwritten", where, i));
      }
      next = off + bytes;
    }
    for (size_t i = next; i < used_; ++i) {
      if (p[i] != kGuardByte) fail(fmt::format("{}: guard byte {} overwritten", where, i));
    }
  }

 private:
  static constexpr size_t kGap = 48;
  Runtime& rt_;
  std::string group_;
  std::shared_ptr<SymmetricHeap> heap_;
  std::vector<std::pair<size_t, size_t>> carved_;
  size_t used_ = 0, cursor_ = 0;
  uint64_t salt_ = 0;
};

}  // namespace symmflow::testing
