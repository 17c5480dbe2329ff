// Small matchers over IR nodes shared by the pattern passes (fuse_allreduce_rmsnorm,
// raise_rms_norm): whether a node calls an op, an argument by its schema name, a literal's value.
#pragma once

#include <string_view>

#include "symmflow/ir/graph.hpp"

namespace symmflow::passes::node_match {

// Whether `n` is a call of op `name` ("aten::add.Tensor"); false for null, fused and copy nodes.
inline bool is_op(const ir::Node* n, std::string_view name) {
  return n && n->kind() == ir::NodeKind::op && n->op()->name() == name;
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

}  // namespace symmflow::passes::node_match
