// Small matchers over IR nodes shared by the pattern passes (fuse_allreduce_rmsnorm,
// raise_rms_norm, raise_rotary, raise_gqa): whether a node calls an op and the nodes that do, an
// argument by its schema name, a literal's value, a value's only use, the other factor of a
// product.
#pragma once

#include <algorithm>
#include <string_view>
#include <vector>

#include "symmflow/ir/graph.hpp"

namespace symmflow::passes::node_match {

// Whether `n` is a call of op `name` ("aten::add.Tensor"); false for null, fused and copy nodes.
inline bool is_op(const ir::Node* n, std::string_view name) {
  return n && n->kind() == ir::NodeKind::op && n->op()->name() == name;
}

// The nodes of `g` that call op `name`, in graph order: a pattern pass's candidates, taken before
// it rewrites (a rewrite erases and inserts nodes).
inline std::vector<ir::Node*> calls_of(const ir::Graph& g, std::string_view name) {
  std::vector<ir::Node*> out;
  for (ir::Node* n : g.nodes()) {
    if (is_op(n, name)) out.push_back(n);
  }
  return out;
}

// The argument of an op node named `name` in its schema, or null.
inline const ir::Arg* arg(const ir::Node& n, std::string_view name) {
  int i = n.op()->schema().arg_index(name);
  return i < 0 ? nullptr : &n.args()[size_t(i)];
}

// Whether `a` is a literal number equal to `v`.
inline bool literal_is(const ir::Arg* a, double v) {
  return a && a->kind == ir::Arg::Kind::literal && a->literal.is_number() &&
         a->literal.to_double() == v;
}

// The value an op node passes as argument `name`, or null (a literal, a list, no such argument).
inline ir::Value* value_arg(const ir::Node& n, std::string_view name) {
  const ir::Arg* a = arg(n, name);
  return a && a->kind == ir::Arg::Kind::value ? a->value : nullptr;
}

inline bool is_output(const ir::Graph& g, const ir::Value* v) {
  return std::find(g.outputs().begin(), g.outputs().end(), v) != g.outputs().end();
}

// The only use of `v` when it has exactly one and is not a graph output, else null.
inline ir::Node* sole_use(const ir::Graph& g, const ir::Value* v) {
  return v->uses().size() == 1 && !is_output(g, v) ? v->uses()[0] : nullptr;
}

// When `mul` is aten::mul.Tensor of `v` and another value (either order): that value, else null.
inline ir::Value* other_factor(const ir::Node* mul, const ir::Value* v) {
  if (!is_op(mul, "aten::mul.Tensor")) return nullptr;
  ir::Value* a = value_arg(*mul, "self");
  ir::Value* b = value_arg(*mul, "other");
  if (!a || !b) return nullptr;
  return a == v ? b : b == v ? a : nullptr;
}

}  // namespace symmflow::passes::node_match
