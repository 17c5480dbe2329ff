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

std::string sequence_parallel_text(int w, const std::string& dtype) {
  auto names = [&](const std::string& prefix) {  // "p0, p1, ..."
    std::string out;
    for (int i = 0; i < w; ++i) out += (i ? ", " : "") + prefix + std::to_string(i);
    return out;
  };
  auto sizes = [&](const std::string& size) {  // "2, 2, ..."
    std::string out;
    for (int i = 0; i < w; ++i) out += (i ? ", " : "") + size;
    return out;
  };
  const std::string& t = dtype;
  const std::string s = std::to_string(3 * w), rows = std::to_string(6 * w);
  return "group tp\ngraph sp(x: " + t + "[2, 3, 17], wq: " + t + "[9, 17], wk: " + t +
         "[9, 17], wo: " + t + "[9, 17]) {\n"
         "  g = symm_mem::_low_contention_all_gather(x, \"tp\")\n"
         "  " + names("p") + " = aten::split_with_sizes(g, [" + sizes("2") + "])\n"
         "  cat = aten::cat([" + names("p") + "], 1)\n"
         "  flat = aten::reshape(cat, [" + rows + ", 17])\n"
         "  pq = aten::permute(wq, [1, 0])\n"
         "  q = aten::mm(flat, pq)\n"
         "  pk = aten::permute(wk, [1, 0])\n"
         "  k = aten::mm(flat, pk)\n"
         "  h = aten::mul.Tensor(q, k)\n"
         "  m = aten::mm(h, wo)\n"
         "  v = aten::reshape(m, [2, " + s + ", 17])\n"
         "  " + names("c") + " = aten::split_with_sizes(v, [" + sizes("3") + "], 1)\n"
         "  c = aten::cat([" + names("c") + "])\n"
         "  r = symm_mem::_low_contention_reduce_scatter(c, \"sum\", \"tp\")\n"
         "  return r, flat\n}\n";
}

}  // namespace symmflow::testing
