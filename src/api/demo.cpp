// The eager block of `symmflow demo` (run_eager_mlp_block in symmflow/api/catalogue.hpp):
// mm -> gelu -> rms_norm -> softmax on random inputs, each op timed as the median of 21 calls,
// the result checked on every element against a naive double-precision reference.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "symmflow/api/catalogue.hpp"
#include "symmflow/ops/call.hpp"

namespace symmflow::api {

namespace {

Tensor random_tensor(const Shape& shape, DType dtype, std::mt19937& rng) {
  std::normal_distribution<double> dist(0.0, 1.0);
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) store_double(t.view(), i, dist(rng) * 0.1);
  return t;
}

// Naive reference of the block, in double, from the (already rounded) inputs.
std::vector<double> reference(const Tensor& x, const Tensor& w, const Tensor& g, double eps) {
  int64_t m = x.size(0), k = x.size(1), n = w.size(1);
  std::vector<double> xs = x.to_doubles(), ws = w.to_doubles(), gs = g.to_doubles();
  std::vector<double> out(size_t(m * n));
  for (int64_t i = 0; i < m; ++i) {
    std::vector<double> row(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += xs[size_t(i * k + p)] * ws[size_t(p * n + j)];
      row[size_t(j)] = 0.5 * acc * (1 + std::erf(acc / std::sqrt(2.0)));
    }
    double ms = 0;
    for (double v : row) ms += v * v;
    double inv = 1 / std::sqrt(ms / double(n) + eps);
    double mx = -1e300;
    for (int64_t j = 0; j < n; ++j) {
      row[size_t(j)] *= inv * gs[size_t(j)];
      mx = std::max(mx, row[size_t(j)]);
    }
    double sum = 0;
    for (double& v : row) sum += (v = std::exp(v - mx));
    for (int64_t j = 0; j < n; ++j) out[size_t(i * n + j)] = row[size_t(j)] / sum;
  }
  return out;
}

template <typename F>
double median_us(F&& f, int iters) {
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
  }
  std::nth_element(t.begin(), t.begin() + iters / 2, t.end());
  return t[size_t(iters / 2)];
}

}  // namespace

EagerBlockResult run_eager_mlp_block(DType dtype) {
  std::mt19937 rng(7);
  const int64_t m = 16, k = 512, n = 512;
  const double eps = 1e-6;
  Tensor x = random_tensor({m, k}, dtype, rng), w = random_tensor({k, n}, dtype, rng);
  Tensor g = random_tensor({n}, dtype, rng);
  Tensor h, a, r, s;
  EagerBlockResult res{m, k, n, {}, 0};
  res.median_us = {
      {"mm", median_us([&] { h = call("aten::mm", {x, w}).to_tensor(); }, 21)},
      {"gelu", median_us([&] { a = call("aten::gelu", {h}).to_tensor(); }, 21)},
      {"rms_norm", median_us([&] { r = call("aten::rms_norm", {a, Value({n}), g, eps}).to_tensor(); }, 21)},
      {"_softmax", median_us([&] { s = call("aten::_softmax", {r, int64_t(-1), false}).to_tensor(); }, 21)},
  };
  std::vector<double> ref = reference(x, w, g, eps), got = s.to_doubles();
  for (size_t i = 0; i < ref.size(); ++i)
    res.worst_rel_error = std::max(res.worst_rel_error, std::abs(got[i] - ref[i]) / (std::abs(ref[i]) + 1e-3));
  return res;
}

}  // namespace symmflow::api
