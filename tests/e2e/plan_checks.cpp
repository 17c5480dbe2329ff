// Independent checks of emitted plans (contract in plan_checks.hpp).
#include "e2e/plan_checks.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "symmflow/ir/text.hpp"

namespace symmflow::e2e {

namespace {

size_t align64(size_t n) {
  return (n + 63) / 64 * 64;
}

// Ops of a group that do not end with every rank synchronised.
bool unsynchronised(const ir::Node& n) {
  static const std::set<std::string> kOps = {"symm_mem::put_signal", "symm_mem::wait_signal",
                                             "symm_mem::get"};
  return kOps.count(n.op()->name()) > 0;
}

}  // namespace

std::vector<std::string> check_plan(const passes::Plan& plan, std::vector<PoolRatio>* ratios) {
  std::vector<std::string> problems;
  const ir::Graph& g = *plan.graph;
  const int n = int(plan.steps.size());
  auto root = [&](int b) {
    while (plan.buffers[size_t(b)].alias_of >= 0) b = plan.buffers[size_t(b)].alias_of;
    return b;
  };
  std::vector<int> lo(plan.buffers.size(), n + 1), hi(plan.buffers.size(), -1);
  auto live = [&](const ir::Value* v, int from, int to) {
    auto it = plan.buffer_of.find(v);
    if (it == plan.buffer_of.end()) return;
    int r = root(it->second);
    lo[size_t(r)] = std::min(lo[size_t(r)], from);
    hi[size_t(r)] = std::max(hi[size_t(r)], to);
  };
  for (int s = 0; s < n; ++s) {
    const ir::Node* node = plan.steps[size_t(s)].node;
    for (const ir::Value* v : node->outputs()) live(v, s, s);
    for (const ir::Value* v : node->inputs()) live(v, s, s);
    if (node->kind() != ir::NodeKind::op && node->kind() != ir::NodeKind::functional) continue;
    const OpDef& op = *node->op();
    if (node->group().empty()) continue;
    size_t new_value = op.schema().returns.size();
    for (int w : op.aliases().written_args) {  // peer-written symm buffers: the whole run
      const std::string& name = op.schema().args[size_t(w)].name;
      bool symm = std::count(op.symm_args().begin(), op.symm_args().end(), name) > 0;
      const ir::Value* v = node->kind() == ir::NodeKind::functional ? node->output(new_value++)
                                                                    : node->args()[size_t(w)].value;
      if (symm && unsynchronised(*node)) live(v, 0, n);
    }
    if (op.name() == "symm_mem::get") {  // peers read src until they synchronise again
      int t = s + 1;
      for (; t < n; ++t) {
        const ir::Node* m = plan.steps[size_t(t)].node;
        if (m->op() && m->group() == node->group() && !unsynchronised(*m)) break;
      }
      live(node->args()[0].value, s, t);
    }
  }
  for (const ir::Value* v : g.outputs()) live(v, n, n);
  for (const auto& w : g.writebacks()) live(w.value, n, n);

  std::vector<std::vector<int>> by_pool(plan.pools.size());
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    const passes::BufferPlan& bp = plan.buffers[b];
    if (bp.pool < 0 || hi[b] < 0) continue;
    if (bp.first_step > lo[b] || bp.last_step < hi[b]) {
      problems.push_back(
          fmt::format("buffer '{}' is used over steps [{}, {}] but planned live over [{}, {}]",
                      bp.name, lo[b], hi[b], bp.first_step, bp.last_step));
    }
    lo[b] = std::min(lo[b], bp.first_step);
    hi[b] = std::max(hi[b], bp.last_step);
    by_pool[size_t(bp.pool)].push_back(int(b));
  }
  for (size_t p = 0; p < plan.pools.size(); ++p) {
    const auto& bs = by_pool[p];
    std::vector<size_t> at_step(size_t(n) + 2, 0);
    for (size_t i = 0; i < bs.size(); ++i) {
      const passes::BufferPlan& a = plan.buffers[size_t(bs[i])];
      for (int s = lo[size_t(bs[i])]; s <= hi[size_t(bs[i])]; ++s)
        at_step[size_t(s)] += align64(a.bytes);
      if (a.offset + a.bytes > plan.pools[p].bytes)
        problems.push_back(
            fmt::format("buffer '{}' ends past its pool {}", a.name, plan.pools[p].name));
      for (size_t j = i + 1; j < bs.size(); ++j) {
        const passes::BufferPlan& b = plan.buffers[size_t(bs[j])];
        bool time =
            lo[size_t(bs[i])] <= hi[size_t(bs[j])] && lo[size_t(bs[j])] <= hi[size_t(bs[i])];
        bool space = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
        if (time && space && a.bytes > 0 && b.bytes > 0) {
          problems.push_back(fmt::format("{}: live buffers '{}' and '{}' overlap",
                                         plan.pools[p].name, a.name, b.name));
        }
      }
    }
    size_t most = *std::max_element(at_step.begin(), at_step.end());
    const passes::PoolPlan& pool = plan.pools[p];
    if (pool.bytes < most || pool.lower_bound < most)
      problems.push_back(
          fmt::format("pool {}: peak {} and lower bound {} below {} bytes live at once", pool.name,
                      pool.bytes, pool.lower_bound, most));
    if (ratios && pool.lower_bound > 0)
      ratios->push_back({pool.name, pool.bytes, pool.lower_bound});
  }
  return problems;
}

std::vector<std::string> comm_sequence(const passes::Plan& plan) {
  std::vector<std::string> out;
  for (const passes::PlanStep& step : plan.steps) {
    const ir::Node* n = step.node;
    if (n->group().empty()) continue;
    std::string line = n->display_name();
    if (auto ov = n->attrs().find("out_variant"); ov != n->attrs().end()) line = ov->second;
    for (size_t i = 0; i < n->args().size(); ++i) {
      const ir::Arg& a = n->args()[i];
      if (a.kind == ir::Arg::Kind::literal) {
        if (n->op()->schema().args[i].name != "peer") line += " " + ir::print_literal(a.literal);
      } else if (a.kind == ir::Arg::Kind::value) {
        line += " " + a.value->type().str();
      }
    }
    out.push_back(std::move(line));
  }
  return out;
}

}  // namespace symmflow::e2e
