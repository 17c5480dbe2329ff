// `symmflow demo`: what a newcomer sees first. Lists the op catalogue, then runs a small MLP block
// eagerly (mm -> gelu -> rms_norm -> softmax) in f32 and bf16, checks every element against a
// naive double-precision reference and prints per-op timings (median of repeated calls).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "symmflow/ops/call.hpp"

namespace symmflow::tool {

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

bool run_block(DType dtype, double tol) {
  std::mt19937 rng(7);
  const int64_t m = 16, k = 512, n = 512;
  const double eps = 1e-6;
  Tensor x = random_tensor({m, k}, dtype, rng), w = random_tensor({k, n}, dtype, rng);
  Tensor g = random_tensor({n}, dtype, rng);
  Tensor h, a, r, s;
  std::vector<std::pair<std::string, double>> times = {
      {"mm", median_us([&] { h = call("aten::mm", {x, w}).to_tensor(); }, 21)},
      {"gelu", median_us([&] { a = call("aten::gelu", {h}).to_tensor(); }, 21)},
      {"rms_norm", median_us([&] { r = call("aten::rms_norm", {a, Value({n}), g, eps}).to_tensor(); }, 21)},
      {"_softmax", median_us([&] { s = call("aten::_softmax", {r, int64_t(-1), false}).to_tensor(); }, 21)},
  };
  std::vector<double> ref = reference(x, w, g, eps), got = s.to_doubles();
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - ref[i]) / (std::abs(ref[i]) + 1e-3));
  bool ok = worst <= tol;
  fmt::print("  {:>4} [{}x{}] @ [{}x{}]: ", dtype_name(dtype), m, k, k, n);
  for (auto& [op, us] : times) fmt::print("{} {:.1f} us  ", op, us);
  fmt::print("| max rel err {:.2e} (tol {:.0e}) {}\n", worst, tol, ok ? "OK" : "FAILED");
  return ok;
}

int run_demo() {
  const Registry& reg = Registry::global();
  fmt::print("symmflow {} demo\n\nop catalogue:\n", SYMMFLOW_VERSION);
  for (const std::string& ns : reg.namespaces()) {
    std::vector<const OpDef*> ops = reg.ops(ns);
    size_t with_kernel = std::count_if(ops.begin(), ops.end(),
                                       [](const OpDef* o) { return o->kernel(Backend::cpu); });
    fmt::print("  {:<9} {:>3} ops, {:>3} with a cpu kernel\n", ns, ops.size(), with_kernel);
  }
  fmt::print("\nsymm_mem ops and the arguments they need in symmetric memory:\n");
  for (const OpDef* op : reg.ops("symm_mem")) {
    fmt::print("  {:<42} symm: {}\n", op->name(),
               op->symm_args().empty() ? "-" : fmt::format("{}", fmt::join(op->symm_args(), ", ")));
  }
  fmt::print("\neager MLP block (mm -> gelu -> rms_norm -> softmax), checked against a double "
             "reference, median of 21 calls:\n");
  bool ok = run_block(DType::f32, 1e-4);
  ok = run_block(DType::bf16, 5e-2) && ok;
  fmt::print("\n{}\n", ok ? "demo: all results match the reference" : "demo: MISMATCH");
  return ok ? 0 : 1;
}

}  // namespace

Command add_demo_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("demo", "Show the op catalogue and run a checked eager block");
  return {sub, run_demo};
}

}  // namespace symmflow::tool
