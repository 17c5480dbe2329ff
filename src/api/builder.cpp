// ProgramBuilder and infer_shapes (api/builder.hpp).
//
// Note [program builder]: a language binding builds programs through the same IR builder the
// text parser uses (Graph::add_op: schema binding, shape functions, name hints), one call per
// node, so whether symmflow takes a node is decided by the registry (its schema, its shape
// function) and never re-derived by the caller; the text format is printed from the built graph
// for people (explain, dumps), not written by the caller. Values cross the API as small integer
// ids into `values` (the builder owns the graph). A call that throws leaves the graph as it was:
// Graph::add_op binds and types before it inserts anything.
#include "symmflow/api/builder.hpp"

#include <optional>

#include <fmt/format.h>

#include "symmflow/ir/graph.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/ops/group_size.hpp"

namespace symmflow::api {

struct ProgramBuilder::State {
  std::unique_ptr<ir::Graph> graph;
  std::vector<ir::Value*> values;
  std::optional<Backend> backend;  // the device's, when one was given
};

ProgramBuilder::ProgramBuilder(std::string name, int world_size, const std::string& device)
    : state_(new State) {
  SF_CHECK(world_size >= 1, "ProgramBuilder: world size must be at least 1, got {}", world_size);
  if (device == "cpu") {
    state_->backend = Backend::cpu;
  } else if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    state_->backend = Backend::cuda;
  } else {
    SF_CHECK(device.empty(), "ProgramBuilder: device '{}' is not 'cpu', 'cuda' or 'cuda:<i>'",
             device);
  }
  state_->graph = std::make_unique<ir::Graph>(std::move(name), world_size);
}

// Note [kernel checks] (ops/registry.hpp) for the builder's device: a refused node is taken out
// again, so the graph stays as it was before the call.
void ProgramBuilder::check_kernel(ir::Node* n) {
  if (!state_->backend) return;
  std::vector<symmflow::Value> args;
  for (const ir::Arg& a : n->args()) args.push_back(ir::meta_value(a));
  std::string why;
  {
    ScopedGroupSizeResolver groups(ir::group_sizes(*state_->graph));
    why = n->op()->kernel_refusal(*state_->backend, args);
  }
  if (why.empty()) return;
  state_->graph->erase(n);
  invalid_usage("{}", why);
}
ProgramBuilder::~ProgramBuilder() = default;
ProgramBuilder::ProgramBuilder(ProgramBuilder&&) noexcept = default;
ProgramBuilder& ProgramBuilder::operator=(ProgramBuilder&&) noexcept = default;

int ProgramBuilder::world_size() const { return state_->graph->world_size(); }

void ProgramBuilder::add_group(const std::string& name, std::vector<std::vector<int>> subgroups) {
  ir::GroupDecl d;
  d.name = name;
  d.subgroups = std::move(subgroups);
  state_->graph->add_group(std::move(d));
}

int ProgramBuilder::add_input(const std::string& name, DType dtype, Shape shape) {
  const std::string safe = ir::safe_value_name(name);
  SF_CHECK(!state_->graph->find_value(safe), "ProgramBuilder: input '{}' is defined twice", name);
  return record({state_->graph->add_input(safe, ir::TensorType{dtype, std::move(shape)})})[0];
}

ir::Value* ProgramBuilder::value(int id, const std::string& where) const {
  SF_CHECK(id >= 0 && size_t(id) < state_->values.size(),
           "ProgramBuilder: {}: value id {} is not a value of this builder ({} values)", where, id,
           state_->values.size());
  return state_->values[size_t(id)];
}

std::vector<int> ProgramBuilder::record(const std::vector<ir::Value*>& outputs) {
  std::vector<int> ids;
  for (ir::Value* v : outputs) {
    ids.push_back(int(state_->values.size()));
    state_->values.push_back(v);
  }
  return ids;
}

namespace {

ir::Arg to_ir(const ProgramBuilder::Arg& a, const std::function<ir::Value*(int)>& value) {
  switch (a.kind) {
    case ProgramBuilder::Arg::Kind::value:
      return ir::Arg::of(value(a.value));
    case ProgramBuilder::Arg::Kind::values: {
      std::vector<ir::Value*> vs;
      for (int id : a.values) vs.push_back(value(id));
      return ir::Arg::of_list(std::move(vs));
    }
    case ProgramBuilder::Arg::Kind::literal:
      break;
  }
  return ir::Arg::of_literal(a.literal);
}

}  // namespace

std::vector<int> ProgramBuilder::add_op(const std::string& op, const std::vector<Arg>& args,
                                        const std::vector<KwArg>& kwargs,
                                        const std::string& name) {
  auto lookup = [&](int id) { return value(id, op); };
  std::vector<ir::Arg> ir_args;
  for (const Arg& a : args) ir_args.push_back(to_ir(a, lookup));
  std::vector<ir::KwArg> ir_kwargs;
  for (const auto& [k, a] : kwargs) ir_kwargs.emplace_back(k, to_ir(a, lookup));
  ir::Node* n = state_->graph->add_op(op, std::move(ir_args), std::move(ir_kwargs),
                                      name.empty() ? name : ir::safe_value_name(name));
  check_kernel(n);
  return record(n->outputs());
}

std::vector<int> ProgramBuilder::add_functional(const std::string& op,
                                                const std::vector<Arg>& args,
                                                const std::vector<KwArg>& kwargs,
                                                const std::string& name) {
  const OpDef& def = Registry::global().get(op);
  SF_CHECK(!def.aliases().written_args.empty(),
           "ProgramBuilder: functional<{}>: {} mutates no argument", op, op);
  auto lookup = [&](int id) { return value(id, op); };
  std::vector<ir::Arg> ir_args;
  for (const Arg& a : args) ir_args.push_back(to_ir(a, lookup));
  std::vector<ir::KwArg> ir_kwargs;
  for (const auto& [k, a] : kwargs) ir_kwargs.emplace_back(k, to_ir(a, lookup));
  ir::Graph& g = *state_->graph;
  ir::Node* n = g.add_functional(def, ir::bind_node_args(def, ir_args, ir_kwargs));
  check_kernel(n);
  if (!name.empty()) {  // `name_r<i>` for the op's returns, `name_<arg>` for each written arg
    const size_t nret = def.schema().returns.size();
    for (size_t i = 0; i < n->outputs().size(); ++i) {
      std::string hint =
          i < nret ? fmt::format("{}_r{}", name, i)
                   : fmt::format("{}_{}", name,
                                 def.schema().args[size_t(def.aliases().written_args[i - nret])].name);
      g.rename(n->outputs()[i], g.fresh_name(ir::safe_value_name(hint)));
    }
  }
  return record(n->outputs());
}

TensorSpec ProgramBuilder::type(int id) const {
  const ir::Value* v = value(id, "type");
  return {v->name(), v->type().dtype, v->type().shape};
}

void ProgramBuilder::set_outputs(const std::vector<int>& ids) {
  std::vector<ir::Value*> outs;
  for (int id : ids) outs.push_back(value(id, "set_outputs"));
  state_->graph->set_outputs(std::move(outs));
}

void ProgramBuilder::add_writeback(int input, int value_id) {
  ir::Value* in = value(input, "add_writeback");
  ir::Value* v = value(value_id, "add_writeback");
  SF_CHECK(in->is_input(), "add_writeback: '{}' is not an input of program '{}'", in->name(),
           state_->graph->name());
  state_->graph->add_writeback(in, v);
}

Program ProgramBuilder::finish(const std::string& filename) const {
  // Program keeps its source as text (with_world_size, compile); the text is printed from the
  // built graph and parsed back by the same parser (a fixed point, tests/ir).
  ParseOptions options;
  options.filename = filename;
  options.world_size = world_size();
  return Program::parse(ir::print_graph(*state_->graph), options);
}

std::vector<TensorSpec> infer_shapes(const std::string& op, const std::vector<symmflow::Value>& args,
                                     const std::vector<std::pair<std::string, symmflow::Value>>& kwargs,
                                     const std::map<std::string, int64_t>& group_sizes) {
  const OpDef& def = Registry::global().get(op);
  SF_CHECK(def.has_shape_fn() || def.schema().returns.empty(), "{} has no shape function", op);
  std::vector<symmflow::Value> bound = bind_args(def, args, kwargs);
  std::vector<TensorSpec> out;
  if (def.schema().returns.empty()) return out;
  ScopedGroupSizeResolver groups([&](std::string_view name) -> std::optional<int64_t> {
    auto it = group_sizes.find(std::string(name));
    if (it == group_sizes.end()) return std::nullopt;
    return it->second;
  });
  for (const symmflow::TensorSpec& s : def.shape_fn()(bound)) out.push_back({"", s.dtype, s.shape});
  return out;
}

}  // namespace symmflow::api
