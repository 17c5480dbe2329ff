// The graph builder: binds a node's arguments to its op's schema exactly as eager calls do
// (ops/call.cpp), types its outputs with the op's shape function (so a graph that builds is well
// typed), and inserts it through Graph::insert (graph.cpp, which keeps the use lists).
//
// Expects: values of this graph as arguments. Guarantees: one Arg per schema argument (defaults
//   filled and marked `defaulted`); outputs named from the hint (fresh when taken); rank-relative
//   arguments only where Note [rank-relative arguments] (graph.hpp) allows them.
// Refuses (InvalidUsage, naming the op and argument): arguments that do not bind, a rank-relative
//   value for a non-int argument or an op without a group, a functional<op> whose written argument
//   is not a tensor, a fused body whose inputs differ from its arguments, a result type of more
//   than 2^40 elements (zero dimensions counted as one).
#include <algorithm>

#include <fmt/format.h>

#include "ir/parser.hpp"
#include "symmflow/ir/graph.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/ops/group_size.hpp"

namespace symmflow::ir {

Tensor meta_of(const TensorType& t) {
  return Tensor::meta(t.shape, t.dtype);
}

symmflow::Value meta_value(const Arg& a) {
  switch (a.kind) {
    case Arg::Kind::value:
      return meta_of(a.value->type());
    case Arg::Kind::value_list: {
      std::vector<Tensor> ts;
      for (const Value* v : a.values) ts.push_back(meta_of(v->type()));
      return ts;
    }
    case Arg::Kind::literal:
      return a.literal;
    case Arg::Kind::rank_relative:
      return a.rank_offset;  // a placeholder int (see the Note)
  }
  return None{};
}

std::string rank_relative_text(int64_t k) {
  return k < 0 ? fmt::format("rank-{}", -k) : fmt::format("rank+{}", k);
}

std::string rank_relative_error(const OpDef& op, size_t i, int64_t k) {
  const FunctionSchema& s = op.schema();
  if (i >= s.args.size()) return "";  // the binder reports extra arguments
  const Argument& arg = s.args[i];
  if ((arg.type.kind != TypeKind::Int && arg.type.kind != TypeKind::SymInt) || arg.type.is_list)
    return fmt::format(
        "{}: argument '{}' is {}, but a rank-relative value ({}) can only be an "
        "int argument",
        op.name(), arg.name, arg.type.str(), rank_relative_text(k));
  if (op.group_arg().empty())
    return fmt::format(
        "{}: argument '{}' is rank-relative ({}) but {} has no group argument to "
        "count ranks in",
        op.name(), arg.name, rank_relative_text(k), op.name());
  return "";
}

int64_t resolve_rank_relative(int64_t k, int rank, int size) {
  SF_CHECK(size > 0, "rank-relative argument {}: group of size {}", rank_relative_text(k), size);
  int64_t r = (int64_t(rank) + k) % size;
  return r < 0 ? r + size : r;
}

GroupSizeResolver group_sizes(const Graph& g) {
  return [&g](std::string_view name) -> std::optional<int64_t> {
    if (!g.find_group(name)) return std::nullopt;
    return g.group_size(name);
  };
}

namespace {

// Binds IR args through the eager binder: tensors become meta tensors; returns the bound args.
std::vector<Arg> bind_ir(const OpDef& op, const std::vector<Arg>& args,
                         const std::vector<KwArg>& kwargs,
                         std::vector<symmflow::Value>* bound_values) {
  std::vector<symmflow::Value> pos;
  KwArgs kw;
  for (const Arg& a : args) pos.push_back(meta_value(a));
  for (const auto& [name, a] : kwargs) kw.emplace_back(name, meta_value(a));
  const FunctionSchema& s = op.schema();
  auto check_rank = [&](const Arg& a, size_t i) {
    if (a.kind != Arg::Kind::rank_relative) return;
    std::string why = rank_relative_error(op, i, a.rank_offset);
    SF_CHECK(why.empty(), "{}", why);
  };
  for (size_t i = 0; i < args.size(); ++i) check_rank(args[i], i);
  for (const auto& [name, a] : kwargs) check_rank(a, size_t(s.arg_index(name)));
  *bound_values = bind_args(op, pos, kw);
  std::vector<Arg> out(s.args.size());
  for (size_t i = 0; i < s.args.size(); ++i) {
    const Arg* given = i < args.size() ? &args[i] : nullptr;
    for (const auto& [name, a] : kwargs) {
      if (name == s.args[i].name) given = &a;
    }
    if (given && given->kind != Arg::Kind::literal) {
      out[i] = *given;
    } else {
      out[i] = Arg::of_literal((*bound_values)[i]);
      out[i].defaulted = given == nullptr;
    }
  }
  return out;
}

// Note [parser limits] for the types shape functions compute: a result of at most 2^40
// elements counting a zero dimension as one (so strides stay far from int64 overflow; found by
// ir_fuzz: a view of a zero-element tensor with a dimension of 2^63 - 1).
TensorType checked_result(const OpDef& op, const TensorSpec& spec) {
  int64_t extent = 1;
  for (int64_t d : spec.shape) {
    constexpr int64_t kMax = text_parser::kMaxElements;
    SF_CHECK(d >= 0 && d <= kMax && extent <= kMax / std::max<int64_t>(d, 1),
             "{}: its result {}{} has more than 2^40 elements", op.name(),
             dtype_name(spec.dtype), shape_str(spec.shape));
    extent *= std::max<int64_t>(d, 1);
  }
  return {spec.dtype, spec.shape};
}

}  // namespace

std::vector<Arg> bind_node_args(const OpDef& op, const std::vector<Arg>& args,
                                const std::vector<KwArg>& kwargs) {
  std::vector<symmflow::Value> unused;
  return bind_ir(op, args, kwargs, &unused);
}

Node* Graph::add_op(std::string_view op_name, std::vector<Arg> args, std::vector<KwArg> kwargs,
                    const std::string& name, Node* before) {
  return add_op(Registry::global().get(op_name), std::move(args), std::move(kwargs), name, before);
}

Node* Graph::add_op(const OpDef& op, std::vector<Arg> args, std::vector<KwArg> kwargs,
                    const std::string& name, Node* before) {
  std::vector<symmflow::Value> bound;
  std::vector<Arg> bound_args = bind_ir(op, args, kwargs, &bound);
  std::vector<TensorSpec> specs;
  if (!op.schema().returns.empty()) {
    ScopedGroupSizeResolver groups(group_sizes(*this));
    specs = op.shape_fn()(bound);
  }
  // One output per result: a list return has as many as the shape function gives (Note [list
  // returns], schema.hpp); fixed returns must get one spec each.
  SF_CHECK(specs.size() == op.aliases().output_count(specs.size()),
           "op '{}': shape function gave {} results for {} returns", op.name(), specs.size(),
           op.schema().returns.size());
  auto n = std::make_unique<Node>();
  n->kind_ = NodeKind::op;
  n->op_ = &op;
  n->args_ = std::move(bound_args);
  for (size_t r = 0; r < specs.size(); ++r) {
    std::string hint =
        name.empty() ? "v" : (specs.size() == 1 ? name : fmt::format("{}_{}", name, r));
    n->outputs_.push_back(new_value(hint, checked_result(op, specs[r]), n.get(), int(r)));
  }
  return insert(std::move(n), before);
}

Node* Graph::add_functional(const OpDef& op, std::vector<Arg> bound, Node* before) {
  auto n = std::make_unique<Node>();
  n->kind_ = NodeKind::functional;
  n->op_ = &op;
  std::vector<TensorType> types;
  if (!op.schema().returns.empty()) {
    std::vector<symmflow::Value> vals;
    for (const Arg& a : bound) vals.push_back(meta_value(a));
    ScopedGroupSizeResolver groups(group_sizes(*this));
    for (const TensorSpec& s : op.shape_fn()(vals)) types.push_back(checked_result(op, s));
  }
  for (int i : op.aliases().written_args) {
    const Arg& a = bound[size_t(i)];
    SF_CHECK(a.kind == Arg::Kind::value, "functional<{}>: written argument '{}' must be a tensor",
             op.name(), op.schema().args[size_t(i)].name);
    types.push_back(a.value->type());
  }
  n->args_ = std::move(bound);
  const size_t nret = types.size() - op.aliases().written_args.size();  // the op's results
  for (size_t r = 0; r < types.size(); ++r) {
    std::string hint =
        r < nret ? "v" : n->args_[size_t(op.aliases().written_args[r - nret])].value->name();
    n->outputs_.push_back(new_value(hint, types[r], n.get(), int(r)));
  }
  return insert(std::move(n), before);
}

Node* Graph::add_copy(Value* source, const std::string& reason, Node* before) {
  auto n = std::make_unique<Node>();
  n->kind_ = NodeKind::copy;
  n->args_.push_back(Arg::of(source));
  n->attrs_["reason"] = reason;
  n->outputs_.push_back(new_value(source->name(), source->type(), n.get(), 0));
  return insert(std::move(n), before);
}

Node* Graph::add_fused(std::vector<Value*> inputs, std::unique_ptr<Graph> body, Node* before) {
  SF_CHECK(body->inputs().size() == inputs.size(), "fused: body has {} inputs for {} arguments",
           body->inputs().size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    SF_CHECK(body->inputs()[i]->type() == inputs[i]->type(),
             "fused: body input '{}' is {} but argument '{}' is {}", body->inputs()[i]->name(),
             body->inputs()[i]->type().str(), inputs[i]->name(), inputs[i]->type().str());
  }
  auto n = std::make_unique<Node>();
  n->kind_ = NodeKind::fused;
  for (Value* v : inputs) n->args_.push_back(Arg::of(v));
  for (size_t r = 0; r < body->outputs().size(); ++r)
    n->outputs_.push_back(new_value("f", body->outputs()[r]->type(), n.get(), int(r)));
  n->body_ = std::move(body);
  return insert(std::move(n), before);
}

}  // namespace symmflow::ir
