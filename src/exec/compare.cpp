// Output comparison for `run --check` (contract and Note [check tolerance] in exec/compare.hpp).
#include "symmflow/exec/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include <fmt/format.h>

#include "symmflow/core/error.hpp"
#include "symmflow/ops/registry.hpp"

namespace symmflow::exec {

namespace {

// Rounding ops a node adds to the chains through it.
int roundings(const ir::Node& n) {
  switch (n.kind()) {
    case ir::NodeKind::copy:
      return 0;
    case ir::NodeKind::fused:
      return int(n.body()->nodes().size());
    case ir::NodeKind::op:
      return n.op()->aliases().is_view() ? 0 : 1;
    case ir::NodeKind::functional:
      return 1;
  }
  return 1;
}

}  // namespace

int rounding_depth(const ir::Graph& graph, const ir::Value* output) {
  const bool mine = output->is_input()
                        ? std::find(graph.inputs().begin(), graph.inputs().end(), output) !=
                              graph.inputs().end()
                        : &output->producer()->owner() == &graph;
  SF_CHECK(mine, "rounding_depth: value '{}' is not a value of graph '{}'", output->name(),
           graph.name());
  std::unordered_map<const ir::Value*, int> depth;  // graph inputs: 0
  auto of = [&](const ir::Value* v) {
    auto it = depth.find(v);
    return it == depth.end() ? 0 : it->second;
  };
  for (const ir::Node* n : graph.nodes()) {
    int d = 0;
    for (const ir::Value* v : n->inputs()) d = std::max(d, of(v));
    d += roundings(*n);
    for (const ir::Value* v : n->outputs()) depth[v] = d;
    if (n->kind() != ir::NodeKind::op) continue;
    for (int a : n->op()->aliases().written_args) {
      const ir::Arg& arg = n->args().at(size_t(a));
      if (arg.kind == ir::Arg::Kind::value) depth[arg.value] = d;
      if (arg.kind == ir::Arg::Kind::value_list)
        for (const ir::Value* v : arg.values) depth[v] = d;
    }
  }
  return std::max(1, of(output));
}

double check_tolerance(DType dtype, int depth) {
  double base = 0;
  switch (dtype) {
    case DType::f32:
      base = 1e-5;
      break;
    case DType::bf16:
    case DType::f16:
      base = 2e-2;
      break;
    case DType::f64:
      base = 1e-12;
      break;
    default:
      return 0;
  }
  return base * std::sqrt(double(std::max(1, depth)));
}

Comparison compare(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  Comparison c;
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    c.mismatch = fmt::format("{}: got {}, expected {}", what, got.str(), want.str());
    return c;
  }
  std::vector<double> a = got.to_doubles(), b = want.to_doubles();
  auto mismatch = [&](size_t i) {
    c.mismatch =
        fmt::format("{} element {}: got {}, expected {} (relative tolerance {:.3g} for {})", what,
                    i, a[i], b[i], tol, dtype_name(got.dtype()));
    return c;
  };
  if (!is_floating(got.dtype())) {
    // Integers and bool, exactly: by bytes, since doubles lose i64 values beyond 2^53.
    const Tensor x = got.contiguous(), y = want.contiguous();
    const size_t size = dtype_size(got.dtype());
    const auto* p = static_cast<const char*>(x.raw_data());
    const auto* q = static_cast<const char*>(y.raw_data());
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::memcmp(p + i * size, q + i * size, size) != 0) return mismatch(i);
    }
    return c;
  }
  // rms of the finite expected values, scaled by the largest so that squares cannot overflow.
  double largest = 0, sum = 0;
  for (double x : b) largest = std::isfinite(x) ? std::max(largest, std::abs(x)) : largest;
  for (double x : b) sum += std::isfinite(x) && largest > 0 ? (x / largest) * (x / largest) : 0;
  const double rms = b.empty() ? 0 : largest * std::sqrt(sum / double(b.size()));
  for (size_t i = 0; i < a.size(); ++i) {
    if ((std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i]) continue;
    // An infinity matches only itself (equal above); NaN only NaN.
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return mismatch(i);
    const double allowed = tol * std::max(std::abs(b[i]), rms);
    const double err = std::abs(a[i] - b[i]);
    if (!(err <= allowed)) return mismatch(i);
    c.worst = std::max(c.worst, err / allowed);
  }
  return c;
}

}  // namespace symmflow::exec
