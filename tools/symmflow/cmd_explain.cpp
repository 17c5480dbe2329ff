// `symmflow explain file.sf [--ranks N] [--json] [--plugin P]`: compiles a graph and explains its
// memory: every planned buffer (pool, offset, size, lifetime first..last step, intermediate or
// output), every compiler-added copy with its reason, each pool's peak beside its lower bound, and
// a text chart per pool of its occupancy over the steps (one row per step; the bar spans the
// pool's bytes, '#' where a live buffer lies). The summary line "intermediate buffers: N" counts
// the distinct (pool, offset) places that intermediate values occupy. Every communication step
// is listed with its group size, bytes and the algorithm each backend runs for it (the table of
// runtime/algorithm.hpp, which the backends use). --json prints {"pools": [{"name","peak_bytes",
// "lower_bound_bytes"}], "buffers": [{"name","pool","offset","bytes","first_step","last_step",
// "intermediate"}], "copies": [{"reason","bytes"}], "collectives": [{"step","op","group",
// "ranks","bytes","cpu","cuda","why"}]}.
// Views and in-place results (no memory of their own, pool -1) are listed under their base.
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "graph_file.hpp"
#include "symmflow/runtime/algorithm.hpp"

namespace symmflow::tool {

namespace {
struct ExplainOptions {
  std::string file;
  std::vector<std::string> plugins;
  int ranks = 4;
  bool json = false;
};

constexpr int kBarWidth = 48;

struct CollectiveStep {
  int step = 0;
  std::string op, group;
  int ranks = 1;
  int64_t bytes = 0;
  AlgorithmChoice algorithm;
};

// Every step with a group: its largest tensor argument and the algorithm the plan chose for it.
std::vector<CollectiveStep> collective_steps(const passes::Plan& plan) {
  std::vector<CollectiveStep> out;
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const passes::PlanStep& step = plan.steps[s];
    if (!step.op.op || step.group.empty()) continue;
    out.push_back({int(s), step.op.op->name(), step.group, step.group_size, step.bytes,
                   step.algorithm});
  }
  return out;
}

std::string pool_name(const passes::Plan& plan, const passes::BufferPlan& b) {
  if (b.pool >= 0) return plan.pools[size_t(b.pool)].name;
  if (b.alias_of >= 0) return "alias of " + plan.buffers[size_t(b.alias_of)].name;
  return "-";
}

int explain_json(const passes::Plan& plan) {
  nlohmann::json pools = nlohmann::json::array(), buffers = nlohmann::json::array(),
                 copies = nlohmann::json::array();
  for (const passes::PoolPlan& p : plan.pools) {
    pools.push_back(
        {{"name", p.name}, {"peak_bytes", p.bytes}, {"lower_bound_bytes", p.lower_bound}});
  }
  for (const passes::BufferPlan& b : plan.buffers) {
    buffers.push_back({{"name", b.name},
                       {"pool", pool_name(plan, b)},
                       {"offset", b.offset},
                       {"bytes", b.bytes},
                       {"first_step", b.first_step},
                       {"last_step", b.last_step},
                       {"intermediate", b.intermediate}});
  }
  nlohmann::json collectives = nlohmann::json::array();
  for (const CollectiveStep& c : collective_steps(plan)) {
    collectives.push_back({{"step", c.step}, {"op", c.op}, {"group", c.group}, {"ranks", c.ranks},
                           {"bytes", c.bytes}, {"cpu", c.algorithm.cpu},
                           {"cuda", c.algorithm.cuda}, {"why", c.algorithm.why}});
  }
  for (const passes::CopyInfo& c : plan.copies) {
    copies.push_back(
        {{"reason", c.reason}, {"bytes", c.bytes}, {"kind", passes::copy_kind_name(c.kind)},
         {"step", c.step}});
  }
  nlohmann::json out = {{"pools", pools}, {"buffers", buffers}, {"copies", copies}, {"collectives", collectives}};
  fmt::print("{}\n", out.dump(2));
  return 0;
}

// One row per step: '#' over the bytes of pool `p` that a live buffer covers at that step.
void print_chart(const passes::Plan& plan, size_t p) {
  const passes::PoolPlan& pool = plan.pools[p];
  fmt::print("\noccupancy of {} ({} B; each cell {} B):\n", pool.name, pool.bytes,
             (pool.bytes + kBarWidth - 1) / kBarWidth);
  const int last = int(plan.steps.size()) - 1;
  for (int s = 0; s <= last; ++s) {
    std::string bar(kBarWidth, '.');
    size_t live = 0;
    for (const passes::BufferPlan& b : plan.buffers) {
      if (b.pool != int(p) || s < b.first_step || s > std::min(b.last_step, last)) continue;
      live += b.bytes;
      if (pool.bytes == 0) continue;
      size_t lo = b.offset * kBarWidth / pool.bytes;
      size_t hi = ((b.offset + b.bytes) * kBarWidth + pool.bytes - 1) / pool.bytes;
      for (size_t c = lo; c < std::min<size_t>(hi, kBarWidth); ++c) bar[c] = '#';
    }
    fmt::print("  {:>4} {:<32} |{}| {} B\n", s, plan.steps[size_t(s)].node->display_name(), bar, live);
  }
}

int explain_text(const passes::Plan& plan, const std::string& file, int ranks) {
  fmt::print("plan of {} ({}, {} ranks): {} steps\n", plan.graph->name(), file, ranks,
             plan.steps.size());
  fmt::print("\npools:\n");
  for (const passes::PoolPlan& p : plan.pools) {
    fmt::print("  {:<16} peak {:>12} B   lower bound {:>12} B   (order {})\n", p.name, p.bytes,
               p.lower_bound, p.order);
  }
  fmt::print("\nbuffers:\n");
  fmt::print("  {:<20} {:<20} {:>10} {:>12} {:>11} {}\n", "name", "pool", "offset", "bytes",
             "steps", "kind");
  std::set<std::pair<int, size_t>> places;
  for (const passes::BufferPlan& b : plan.buffers) {
    if (b.pool >= 0 && b.intermediate) places.insert({b.pool, b.offset});
    fmt::print("  {:<20} {:<20} {:>#10x} {:>12} {:>5}..{:<5} {}\n", b.name, pool_name(plan, b),
               b.offset, b.bytes, b.first_step, b.last_step,
               b.intermediate ? "intermediate" : "output");
  }
  std::vector<std::string> where;
  for (const auto& [pool, offset] : places) {
    where.push_back(fmt::format("{}+{:#x}", plan.pools[size_t(pool)].name, offset));
  }
  fmt::print("intermediate buffers: {} ({})\n", places.size(), fmt::join(where, ", "));
  fmt::print("\ncompiler-added copies: {}\n", plan.copies.size());
  for (const passes::CopyInfo& c : plan.copies) {
    fmt::print("  step {} copy-{} {} B: {}\n", c.step, passes::copy_kind_name(c.kind), c.bytes,
               c.reason);
  }
  std::vector<CollectiveStep> collectives = collective_steps(plan);
  fmt::print("\ncollectives: {} (algorithm per op, bytes and group size; tunables "
             "one_shot_max_bytes, cuda_one_shot_max_bytes)\n",
             collectives.size());
  if (!collectives.empty()) {
    fmt::print("  {:>4}  {:<34} {:<8} {:>5} {:>10}  {:<12} {:<20} {}\n", "step", "op", "group",
               "ranks", "bytes", "cpu", "cuda", "why");
  }
  for (const CollectiveStep& c : collectives) {
    fmt::print("  {:>4}  {:<34} {:<8} {:>5} {:>10}  {:<12} {:<20} {}\n", c.step, c.op, c.group,
               c.ranks, c.bytes, c.algorithm.cpu, c.algorithm.cuda, c.algorithm.why);
  }
  for (size_t p = 0; p < plan.pools.size(); ++p) print_chart(plan, p);
  return 0;
}

int run_explain(const ExplainOptions& o) {
  std::shared_ptr<const passes::Plan> plan = compile_file(o.file, o.ranks, o.plugins);
  return o.json ? explain_json(*plan) : explain_text(*plan, o.file, o.ranks);
}
}  // namespace

Command add_explain_command(CLI::App& app) {
  auto o = std::make_shared<ExplainOptions>();
  CLI::App* sub =
      app.add_subcommand("explain", "Explain a compiled graph's memory plan and copies");
  sub->add_option("file", o->file, "Graph file (.sf)")->required();
  sub->add_option("--ranks", o->ranks, "World size that sizes the groups (default 4)");
  sub->add_flag("--json", o->json, "Print JSON");
  sub->add_option("--plugin", o->plugins, "Load a plugin shared library first (repeatable)");
  return {sub, [o] { return run_explain(*o); }};
}

}  // namespace symmflow::tool
