// The explain data of a plan, and its JSON (symmflow/api/explain.hpp). make_explain is the one
// place in the api that reads passes::Plan (Note [plan behind one file]).
//
// Note [plan behind one file]: the Plan's steps, buffers and copies are being retyped (issue 15,
// item 2); the api reads them here only, into plain structs, so that the rest of the api and the
// CLI never see an IR node.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "api/explain_internal.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/kernels/algorithm.hpp"

namespace symmflow::api {

namespace {

std::string pool_name(const passes::Plan& plan, const passes::BufferPlan& b) {
  if (b.pool >= 0) return plan.pools[size_t(b.pool)].name;
  if (b.alias_of >= 0) return "alias of " + plan.buffers[size_t(b.alias_of)].name;
  return "-";
}

// Every communication step: the group, bytes and algorithm the plan chose (Note [typed plan]).
std::vector<ExplainCollective> collectives_of(const passes::Plan& plan) {
  std::vector<ExplainCollective> out;
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const passes::PlanStep& step = plan.steps[s];
    if (!step.op.op || step.group.empty()) continue;
    out.push_back({int(s), step.op.op->name(), step.group, step.group_size, step.bytes,
                   step.algorithm.cpu, step.algorithm.cuda, step.algorithm.why});
  }
  return out;
}

// Every declared group with its subgroups as this world size makes them.
std::vector<ExplainGroup> groups_of(const ir::Graph& graph, int world_size) {
  std::vector<ExplainGroup> out;
  for (const ir::GroupDecl& g : graph.groups()) {
    ExplainGroup e{g.name, g.size(world_size), {}, g.ranks_outside(world_size)};
    if (!g.subgroups.empty()) {
      e.subgroups = g.subgroups;
    } else {
      for (int r = 0; r < world_size; r += std::max(e.ranks, 1))
        e.subgroups.push_back(g.members_of(r, world_size));
    }
    out.push_back(std::move(e));
  }
  return out;
}

DType dtype_from(const std::string& name) {
  std::optional<DType> d = parse_dtype(name);
  SF_CHECK(d.has_value(), "explain JSON: unknown dtype '{}'", name);
  return *d;
}

}  // namespace

ExplainData make_explain(const passes::Plan& plan, int world_size) {
  ExplainData d;
  d.program = plan.graph->name();
  d.world_size = world_size;
  for (const passes::PlanStep& step : plan.steps)
    d.steps.push_back({step.node->display_name(), step.op.op != nullptr && step.op.op->has(Tag::collective)});
  for (const passes::PoolPlan& p : plan.pools) d.pools.push_back({p.name, p.bytes, p.lower_bound, p.order});
  for (const passes::BufferPlan& b : plan.buffers) {
    d.buffers.push_back({b.name, pool_name(plan, b), b.pool, b.offset, b.bytes, b.type.dtype,
                         b.type.shape, b.first_step, b.last_step, b.intermediate});
  }
  for (const passes::CopyInfo& c : plan.copies) d.copies.push_back({c.step, passes::copy_kind_name(c.kind), c.reason, c.bytes});
  d.collectives = collectives_of(plan);
  d.groups = groups_of(*plan.graph, world_size);
  return d;
}

std::string to_json(const ExplainData& d, int indent) {
  nlohmann::json steps = nlohmann::json::array(), pools = nlohmann::json::array(),
                 buffers = nlohmann::json::array(), copies = nlohmann::json::array(),
                 collectives = nlohmann::json::array(), groups = nlohmann::json::array();
  for (const ExplainStep& s : d.steps)
    steps.push_back({{"name", s.name}, {"communicates", s.communicates}});
  for (const ExplainPool& p : d.pools) {
    pools.push_back({{"name", p.name}, {"peak_bytes", p.peak_bytes},
                     {"lower_bound_bytes", p.lower_bound_bytes}, {"order", p.order}});
  }
  for (const ExplainBuffer& b : d.buffers) {
    buffers.push_back({{"name", b.name}, {"pool", b.pool}, {"pool_index", b.pool_index},
                       {"offset", b.offset}, {"bytes", b.bytes},
                       {"dtype", std::string(dtype_name(b.dtype))}, {"shape", b.shape},
                       {"first_step", b.first_step}, {"last_step", b.last_step},
                       {"intermediate", b.intermediate}});
  }
  for (const ExplainCopy& c : d.copies)
    copies.push_back({{"reason", c.reason}, {"bytes", c.bytes}, {"kind", c.kind}, {"step", c.step}});
  for (const ExplainCollective& c : d.collectives) {
    collectives.push_back({{"step", c.step}, {"op", c.op}, {"group", c.group}, {"ranks", c.ranks},
                           {"bytes", c.bytes}, {"cpu", c.cpu}, {"cuda", c.cuda}, {"why", c.why}});
  }
  for (const ExplainGroup& g : d.groups) {
    groups.push_back({{"name", g.name}, {"ranks", g.ranks}, {"subgroups", g.subgroups},
                      {"outside", g.outside}});
  }
  nlohmann::json out = {{"program", d.program}, {"world_size", d.world_size}, {"steps", steps},
                        {"pools", pools},       {"buffers", buffers},         {"copies", copies},
                        {"collectives", collectives}, {"groups", groups}};
  return out.dump(indent);
}

ExplainData explain_from_json(const std::string& text) try {
  nlohmann::json j = nlohmann::json::parse(text);
  ExplainData d;
  d.program = j.at("program").get<std::string>();
  d.world_size = j.at("world_size").get<int>();
  for (const auto& s : j.at("steps")) d.steps.push_back({s.at("name"), s.at("communicates")});
  for (const auto& p : j.at("pools"))
    d.pools.push_back({p.at("name"), p.at("peak_bytes"), p.at("lower_bound_bytes"), p.at("order")});
  for (const auto& b : j.at("buffers")) {
    d.buffers.push_back({b.at("name"), b.at("pool"), b.at("pool_index"), b.at("offset"),
                         b.at("bytes"), dtype_from(b.at("dtype")), b.at("shape").get<Shape>(),
                         b.at("first_step"), b.at("last_step"), b.at("intermediate")});
  }
  for (const auto& c : j.at("copies"))
    d.copies.push_back({c.at("step"), c.at("kind"), c.at("reason"), c.at("bytes")});
  for (const auto& c : j.at("collectives")) {
    d.collectives.push_back({c.at("step"), c.at("op"), c.at("group"), c.at("ranks"), c.at("bytes"),
                             c.at("cpu"), c.at("cuda"), c.at("why")});
  }
  if (j.contains("groups")) {
    for (const auto& g : j.at("groups")) {
      d.groups.push_back({g.at("name"), g.at("ranks"),
                          g.at("subgroups").get<std::vector<std::vector<int>>>(),
                          g.at("outside").get<std::vector<int>>()});
    }
  }
  return d;
} catch (const nlohmann::json::exception& e) {
  invalid_usage("explain JSON does not parse: {}", e.what());
}

}  // namespace symmflow::api
