// Random graphs for the property tests of realize_symm_mem, lower_out_variants and schedule:
// matmuls, pointwise ops, fused regions, views, collectives of several kinds (one-shot,
// functional two-shot, collective_permute, put/wait signals, barriers) over two groups.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "symmflow/ir/graph.hpp"

namespace symmflow::testing {

struct RandomGraphOptions {
  size_t nodes = 200;
  size_t inputs = 6;
  uint32_t seed = 1;
  size_t window = 12;  // operands mostly come from the last `window` values
};

inline std::unique_ptr<ir::Graph> random_graph(const RandomGraphOptions& o) {
  using ir::Arg;
  auto g = std::make_unique<ir::Graph>("random", 4);
  g->add_group({"tp", 0, {}, {}});
  g->add_group({"dp", 2, {}, {}});
  std::mt19937 rng(o.seed);
  auto pick_int = [&rng](size_t n) {
    return size_t(std::uniform_int_distribution<size_t>(0, n - 1)(rng));
  };
  ir::TensorType t{DType::f32, {8, 8}};
  std::vector<ir::Value*> pool;
  for (size_t i = 0; i < o.inputs; ++i) pool.push_back(g->add_input("in" + std::to_string(i), t));
  auto operand = [&]() -> ir::Value* {
    if (pick_int(10) == 0) return pool[pick_int(pool.size())];
    size_t w = std::min(o.window, pool.size());
    return pool[pool.size() - 1 - pick_int(w)];
  };
  const char* groups[] = {"tp", "dp"};
  const OpDef& two_shot = Registry::global().get("symm_mem::two_shot_all_reduce_");
  const OpDef& put = Registry::global().get("symm_mem::put_signal");
  const OpDef& wait = Registry::global().get("symm_mem::wait_signal");
  while (g->nodes().size() < o.nodes) {
    std::string grp = groups[pick_int(2)];
    ir::Node* n = nullptr;
    switch (pick_int(14)) {
      case 0:
      case 1:
        n = g->add_op("aten::mm", {Arg::of(operand()), Arg::of(operand())});
        break;
      case 2:
        n = g->add_op("aten::add.Tensor", {Arg::of(operand()), Arg::of(operand())});
        break;
      case 3:
        n = g->add_op("aten::relu", {Arg::of(operand())});
        break;
      case 4:
        n = g->add_op("aten::t", {Arg::of(operand())});
        break;
      case 5:
        n = g->add_op("aten::view",
                      {Arg::of(operand()), Arg::of_literal(std::vector<int64_t>{8, 8})});
        break;
      case 6:
      case 7:
        n = g->add_op("symm_mem::one_shot_all_reduce",
                      {Arg::of(operand()), Arg::of_literal("sum"), Arg::of_literal(grp)});
        break;
      case 8:
        n = g->add_functional(
            two_shot,
            ir::bind_node_args(
                two_shot, {Arg::of(operand()), Arg::of_literal("sum"), Arg::of_literal(grp)}, {}));
        break;
      case 9:
        n = g->add_op("symm_mem::collective_permute",
                      {Arg::of(operand()), Arg::of_literal(1), Arg::of_literal(grp)});
        break;
      case 10: {
        auto body = std::make_unique<ir::Graph>("fused", 4);
        ir::Value* a = body->add_input("a", t);
        ir::Value* b = body->add_input("b", t);
        ir::Node* s = body->add_op("aten::add.Tensor", {Arg::of(a), Arg::of(b)});
        ir::Node* r = body->add_op("aten::sin", {Arg::of(s->output())});
        body->set_outputs({r->output()});
        n = g->add_fused({operand(), operand()}, std::move(body));
        break;
      }
      case 11: {
        ir::Node* p = g->add_functional(
            put, ir::bind_node_args(put,
                                    {Arg::of(operand()), Arg::of(operand()), Arg::of_literal(1),
                                     Arg::of_literal(0), Arg::of_literal(grp)},
                                    {}));
        pool.push_back(p->output());
        n = g->add_functional(wait, ir::bind_node_args(wait,
                                                       {Arg::of(p->output()), Arg::of_literal(3),
                                                        Arg::of_literal(0), Arg::of_literal(grp)},
                                                       {}));
        break;
      }
      case 12:
        n = g->add_op("symm_mem::barrier", {Arg::of_literal(grp)});
        break;
      default:
        n = g->add_op("aten::sin", {Arg::of(operand())});
        break;
    }
    for (ir::Value* v : n->outputs()) pool.push_back(v);
  }
  std::vector<ir::Value*> outs(pool.end() - std::ptrdiff_t(std::min<size_t>(3, pool.size())),
                               pool.end());
  g->set_outputs(outs);
  return g;
}

}  // namespace symmflow::testing
