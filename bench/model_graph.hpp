// Realistic model graphs for the compiler benchmarks and speed tests: a stack of tensor-parallel
// transformer-like layers, each an attention-like block (rms_norm, matmul, a pointwise chain with
// a rotary table shared by every layer, a view, a matmul, an all-reduce on `tp`, a residual add)
// and an MLP block (rms_norm, matmul, gelu chain, matmul, an in-place two-shot all-reduce on `tp`,
// a residual add). Layers are appended until the graph holds `nodes` nodes; each layer has its
// own weights, and the rotary table and norm weight are used by every layer (long use lists).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "symmflow/ir/graph.hpp"
#include "symmflow/ops/registry.hpp"

namespace symmflow::bench {

struct ModelGraphOptions {
  size_t nodes = 1000;
  int64_t tokens = 16;
  int64_t hidden = 64;
  int world_size = 4;
};

inline std::unique_ptr<ir::Graph> model_graph(const ModelGraphOptions& o) {
  using ir::Arg;
  auto g = std::make_unique<ir::Graph>("model", o.world_size);
  g->add_group({"tp", 0, {}, {}});
  const ir::TensorType act{DType::f32, {o.tokens, o.hidden}};
  const ir::TensorType weight{DType::f32, {o.hidden, o.hidden}};
  ir::Value* x = g->add_input("x", act);
  ir::Value* rope = g->add_input("rope", act);
  ir::Value* norm_w = g->add_input("norm_w", ir::TensorType{DType::f32, {o.hidden}});
  const std::vector<int64_t> norm_shape{o.hidden}, flat{o.tokens * o.hidden},
      shape{o.tokens, o.hidden};
  const OpDef& two_shot = Registry::global().get("symm_mem::two_shot_all_reduce_");
  auto op = [&](const char* name, std::vector<Arg> args) {
    return g->add_op(name, std::move(args))->output();
  };
  auto norm = [&](ir::Value* v) {
    return op("aten::rms_norm", {Arg::of(v), Arg::of_literal(norm_shape), Arg::of(norm_w)});
  };
  for (int layer = 0; g->nodes().size() < o.nodes; ++layer) {
    auto w = [&](const char* what) { return g->add_input(what + std::to_string(layer), weight); };
    ir::Value *wq = w("wq"), *wo = w("wo"), *w1 = w("w1"), *w2 = w("w2");
    // Attention-like block.
    ir::Value* h = norm(x);
    ir::Value* q = op("aten::mm", {Arg::of(h), Arg::of(wq)});
    q = op("aten::mul.Tensor", {Arg::of(q), Arg::of(rope)});
    q = op("aten::add.Tensor", {Arg::of(q), Arg::of(rope)});
    q = op("aten::view", {Arg::of(q), Arg::of_literal(flat)});
    q = op("aten::silu", {Arg::of(q)});
    q = op("aten::view", {Arg::of(q), Arg::of_literal(shape)});
    ir::Value* a = op("aten::mm", {Arg::of(q), Arg::of(wo)});
    a = op("symm_mem::one_shot_all_reduce",
           {Arg::of(a), Arg::of_literal("sum"), Arg::of_literal("tp")});
    x = op("aten::add.Tensor", {Arg::of(x), Arg::of(a)});
    // MLP block.
    h = norm(x);
    ir::Value* u = op("aten::mm", {Arg::of(h), Arg::of(w1)});
    u = op("aten::gelu", {Arg::of(u)});
    u = op("aten::mul.Scalar", {Arg::of(u), Arg::of_literal(0.5)});
    u = op("aten::tanh", {Arg::of(u)});
    ir::Value* d = op("aten::mm", {Arg::of(u), Arg::of(w2)});
    g->add_op(two_shot, {Arg::of(d), Arg::of_literal("sum"), Arg::of_literal("tp")});
    x = op("aten::add.Tensor", {Arg::of(x), Arg::of(d)});
  }
  g->set_outputs({x});
  return g;
}

}  // namespace symmflow::bench
