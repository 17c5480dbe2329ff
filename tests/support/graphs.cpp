// Test support: graphs and plans from text (contract in graphs.hpp).
#include "support/graphs.hpp"

#include <fmt/format.h>

#include "symmflow/ir/text.hpp"
#include "symmflow/passes/plan_memory.hpp"

namespace symmflow::testing {

std::unique_ptr<ir::Graph> parse(const std::string& text, int world_size) {
  ir::ParseOptions o;
  o.world_size = world_size;
  return ir::parse_graph(text, o);
}

std::shared_ptr<const passes::Plan> plan_text(const std::string& text, int world_size) {
  std::shared_ptr<ir::Graph> g = parse(text, world_size);
  return passes::emit_plan(g, passes::plan_memory(*g));
}

std::string tp_mlp_text(int layers, bool placed) {
  std::string params = "x: f32[16, 64]";
  for (int l = 0; l < layers; ++l) params += fmt::format(", w{}: f32[64, 64]", l);
  std::string body;
  std::string in = "x";
  for (int l = 0; l < layers; ++l) {
    body += fmt::format("  h{} = aten::mm({}, w{}){}\n", l, in, l,
                        placed ? " @ symm[tp] {out_variant = \"aten::mm.out\"}" : "");
    body += fmt::format("  r{} = symm_mem::one_shot_all_reduce(h{}, \"sum\", \"tp\"){}\n", l, l,
                        placed ? " @ regular {out_variant = \"symm_mem::one_shot_all_reduce_out\"}" : "");
    in = fmt::format("r{}", l);
  }
  return fmt::format("group tp\ngraph tp_mlp({}) {{\n{}  return {}\n}}\n", params, body, in);
}

}  // namespace symmflow::testing
