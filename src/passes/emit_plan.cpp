// emit_plan: packages a scheduled graph and its memory plan as a typed Plan (Note [typed plan] in
// include/symmflow/passes/plan.hpp).
//
// Expects: `memory` = plan_memory(*graph) for this graph, unchanged since.
// Guarantees:
//   - values: the graph inputs, then every node's outputs in step order, each with its planned
//     buffer (-1: caller memory, or a view made by its step); steps = one per node, in order;
//     pools, buffers, buffer_of and events taken from the memory plan;
//   - each step resolves what exec needs: an op node calls its op, or the out variant named by
//     attrs["out_variant"] (lower_out_variants) with the results as its out args and every other
//     argument bound by name, defaults filled (bind_args over meta tensors); a functional<op>
//     node writes copies of op's written args into its new values; a copy node has its kind from
//     attrs["copy"] ("identity" when absent) and its reason from attrs["reason"]; a fused node
//     carries its body; every op with a group carries the group's size, its largest tensor
//     operand in bytes and collective_algorithm()'s choice for it;
//   - copies lists every copy the compiler added, in step order: each copy step (bytes of its
//     output), each functional<op> step (bytes of its written arguments; reason attrs["reason"]
//     or "<op> writes <args> whose old value is still needed"), and each writeback whose value is
//     not the input itself (kind writeback, step = steps.size());
//   - entry_barriers: the groups, in step order, of the ops tagged peer_written (Note [barrier
//     before each run] in exec/executable.cpp), each with symm_mem::barrier resolved.
// Refuses: a memory plan that does not cover the graph, an out_variant attribute naming an op
//   that is not registered or whose out args do not match the node's results (InvalidUsage).
#include <algorithm>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "symmflow/ops/call.hpp"
#include "symmflow/passes/plan_memory.hpp"

namespace symmflow::passes {

namespace {

void check_coverage(const std::vector<ir::Node*>& nodes, const MemoryPlan& memory) {
  for (const ir::Node* n : nodes) {
    for (const ir::Value* v : n->outputs()) {
      bool input_view = false;
      if (n->kind() == ir::NodeKind::op) {
        int a = n->op()->aliases().output_alias(size_t(v->index()));
        input_view = a >= 0 && n->args()[size_t(a)].kind == ir::Arg::Kind::value &&
                     !memory.buffer_of.count(n->args()[size_t(a)].value);
      }
      SF_CHECK(input_view || memory.buffer_of.count(v),
               "emit_plan: value '{}' of {} has no buffer (the memory plan is not of this graph)",
               v->name(), n->display_name());
    }
  }
}

std::string attr_or(const ir::Node& n, const std::string& key, std::string fallback) {
  auto it = n.attrs().find(key);
  return it != n.attrs().end() ? it->second : std::move(fallback);
}

// Why an identity copy exists, from where its result goes.
CopyReason identity_cause(const ir::Node& copy) {
  const auto& uses = copy.output()->uses();
  if (!uses.empty() && std::all_of(uses.begin(), uses.end(), [](const ir::Node* u) {
        return u->kind() == ir::NodeKind::fused;
      }))
    return CopyReason::strided_fused_input;
  for (const ir::Node* u : uses) {
    if (!u->op() || !u->op()->has(Tag::signal)) continue;
    for (int w : u->op()->aliases().written_args) {
      const ir::Arg& a = u->args()[size_t(w)];
      if (a.kind == ir::Arg::Kind::value && a.value == copy.output()) return CopyReason::peer_race;
    }
  }
  return CopyReason::symm_placement;
}

class Builder {
 public:
  Builder(Plan& plan, const ir::Graph& graph) : plan_(plan), graph_(graph) {}

  void build() {
    size_t values = graph_.inputs().size();
    for (const ir::Node* n : graph_.nodes()) values += n->outputs().size();
    plan_.values.reserve(values);
    id_.reserve(values);
    plan_.steps.reserve(graph_.nodes().size());
    for (const ir::Value* v : graph_.inputs()) plan_.inputs.push_back(add_value(v));
    for (const ir::Node* n : graph_.nodes()) plan_.steps.push_back(step_of(*n));
    for (const ir::Value* v : graph_.outputs()) plan_.outputs.push_back(id_.at(v));
    for (const auto& w : graph_.writebacks())
      plan_.writebacks.push_back({w.input->index(), id_.at(w.value)});
    list_copies();
    list_entry_barriers();
  }

 private:
  int add_value(const ir::Value* v) {
    PlanValue pv{v->name(), v->type(), -1, v->is_input() ? v->index() : -1};
    if (auto b = plan_.buffer_of.find(v); b != plan_.buffer_of.end()) pv.buffer = b->second;
    const int id = int(plan_.values.size());
    id_.emplace(v, id);
    plan_.values.push_back(std::move(pv));
    return id;
  }

  Operand operand(const ir::Arg& a) const {
    Operand o;
    switch (a.kind) {
      case ir::Arg::Kind::value:
        o.kind = Operand::Kind::value;
        o.value = id_.at(a.value);
        break;
      case ir::Arg::Kind::value_list:
        o.kind = Operand::Kind::value_list;
        for (const ir::Value* v : a.values) o.values.push_back(id_.at(v));
        break;
      case ir::Arg::Kind::literal:
        o.literal = a.literal;
        break;
      case ir::Arg::Kind::rank_relative:
        o.kind = Operand::Kind::rank_relative;
        o.rank_offset = a.rank_offset;
        break;
    }
    return o;
  }

  PlanStep step_of(const ir::Node& n) {
    PlanStep step;
    step.node = &n;
    step.args.reserve(n.args().size());
    for (const ir::Arg& a : n.args()) step.args.push_back(operand(a));
    for (const ir::Value* v : n.outputs()) step.results.push_back(add_value(v));
    switch (n.kind()) {
      case ir::NodeKind::op:
        step.kind = StepKind::call;
        step.op.op = n.op();
        for (size_t r = 0; r < n.outputs().size(); ++r)
          step.result_aliases.push_back(n.op()->aliases().output_alias(r));
        if (n.attrs().count("out_variant")) bind_out_variant(n, step);
        step.written = step.op.called()->aliases().written_args;
        break;
      case ir::NodeKind::functional: {
        step.kind = StepKind::functional;
        step.op.op = n.op();
        step.written = n.op()->aliases().written_args;
        size_t new_value = n.result_count();
        for (int w : step.written) step.new_values.push_back({w, step.results.at(new_value++)});
        step.copy = CopyKind::functional;
        step.cause = CopyReason::old_value_needed;
        break;
      }
      case ir::NodeKind::copy: {
        step.kind = StepKind::copy;
        std::string kind = attr_or(n, "copy", "identity");
        step.copy = kind == "input" ? CopyKind::input : CopyKind::identity;
        step.cause = step.copy == CopyKind::input ? CopyReason::graph_input_to_symm
                                                  : identity_cause(n);
        step.reason = attr_or(n, "reason", "");
        step.copy_bytes = n.output()->type().bytes();
        break;
      }
      case ir::NodeKind::fused:
        step.kind = StepKind::fused;
        step.body = n.body();
        break;
    }
    describe_communication(n, step);
    return step;
  }

  // Binds the out variant: the node's args by name, the k-th out arg = the k-th result.
  void bind_out_variant(const ir::Node& n, PlanStep& step) const {
    const std::string& name = n.attrs().at("out_variant");
    const OpDef* out_op = n.op()->out_op();
    if (!out_op || out_op->name() != name) out_op = &Registry::global().get(name);
    const auto& out_args = out_op->aliases().out_args;
    SF_CHECK(out_args.size() == n.outputs().size(),
             "emit_plan: {} has {} results but its out variant {} has {} out arguments",
             n.display_name(), n.outputs().size(), out_op->name(), out_args.size());
    std::vector<Operand> args(out_op->schema().args.size());
    KwArgs known;
    for (size_t j = 0; j < out_op->schema().args.size(); ++j) {
      const std::string& arg = out_op->schema().args[j].name;
      auto k = std::find(out_args.begin(), out_args.end(), int(j));
      if (k != out_args.end()) {
        size_t r = size_t(k - out_args.begin());
        args[j].kind = Operand::Kind::value;
        args[j].value = step.results[r];
        known.push_back({arg, ir::meta_of(n.output(r)->type())});
        continue;
      }
      int i = n.op()->schema().arg_index(arg);
      if (i < 0) continue;  // defaulted below
      const ir::Arg& a = n.args()[size_t(i)];
      args[j] = step.args[size_t(i)];
      if (a.kind == ir::Arg::Kind::literal) {
        known.push_back({arg, a.literal});
      } else if (a.kind == ir::Arg::Kind::rank_relative) {  // an int whichever rank resolves it
        known.push_back({arg, ir::resolve_rank_relative(a.rank_offset, 0, 1)});
      } else if (a.kind == ir::Arg::Kind::value) {
        known.push_back({arg, ir::meta_of(a.value->type())});
      } else {
        std::vector<Tensor> metas;
        for (const ir::Value* v : a.values) metas.push_back(ir::meta_of(v->type()));
        known.push_back({arg, std::move(metas)});
      }
    }
    std::vector<Value> defaults = bind_args(*out_op, {}, known);  // fills the rest
    for (size_t j = 0; j < args.size(); ++j) {
      if (args[j].kind == Operand::Kind::literal && args[j].literal.is_none())
        args[j].literal = defaults[j];
    }
    step.op.out_variant = out_op;
    step.args = std::move(args);
    step.result_aliases.assign(n.outputs().size(), -1);
  }

  void describe_communication(const ir::Node& n, PlanStep& step) const {
    for (const ir::Arg& a : n.args()) {
      if (a.kind != ir::Arg::Kind::value) continue;
      const ir::TensorType& t = a.value->type();
      step.bytes = std::max(step.bytes, numel(t.shape) * int64_t(dtype_size(t.dtype)));
    }
    if (!n.op() || n.group().empty()) return;
    step.group = n.group();
    step.group_size = graph_.group_size(step.group);
    step.algorithm = kernels::collective_algorithm(n.op()->name(), step.bytes, step.group_size);
    if (std::optional<kernels::SpanShape> span = span_of(step.group))
      step.algorithm = kernels::spanning_algorithm(n.op()->name(), step.bytes, *span);
  }

  // Note [hosts]: of the subgroups of `group` that span hosts (Graph::hosts), the one over most
  // hosts: its hosts, members per host and whether equal; nullopt when none spans hosts.
  std::optional<kernels::SpanShape> span_of(const std::string& group) const {
    const std::vector<int>& hosts = graph_.hosts();
    const ir::GroupDecl* decl = graph_.find_group(group);
    if (hosts.empty() || !decl) return std::nullopt;
    std::optional<kernels::SpanShape> widest;
    for (int r = 0; r < graph_.world_size(); ++r) {
      std::map<int, int> per_host;
      for (int m : decl->members_of(r, graph_.world_size())) ++per_host[hosts[size_t(m)]];
      if (per_host.size() < 2) continue;
      kernels::SpanShape s{int(per_host.size()), 0, true};
      for (const auto& [h, n] : per_host) {
        s.uniform = s.uniform && (s.per_host == 0 || s.per_host == n);
        s.per_host = std::max(s.per_host, n);
      }
      if (!widest || s.hosts > widest->hosts) widest = s;
    }
    return widest;
  }

  void list_copies() {
    for (size_t s = 0; s < plan_.steps.size(); ++s) {
      PlanStep& step = plan_.steps[s];
      if (step.kind == StepKind::functional) {
        std::vector<std::string> written;
        for (int w : step.written) {
          const Operand& o = step.args[size_t(w)];
          std::vector<int> ids = o.kind == Operand::Kind::value ? std::vector<int>{o.value}
                                                                : o.values;
          for (int v : ids) {
            step.copy_bytes += plan_.values[size_t(v)].type.bytes();
            written.push_back(plan_.values[size_t(v)].name);
          }
        }
        step.reason = attr_or(*step.node, "reason",
                              fmt::format("{} writes {} whose old value is still needed",
                                          step.node->display_name(), fmt::join(written, ", ")));
      }
      if (step.copy == CopyKind::none) continue;
      plan_.copies.push_back({int(s), step.copy, step.cause, step.reason, step.copy_bytes});
    }
    for (const auto& w : graph_.writebacks()) {
      if (w.value == w.input) continue;
      plan_.copies.push_back(
          {int(plan_.steps.size()), CopyKind::writeback, CopyReason::input_mutated,
           fmt::format("graph input '{}' is mutated: its final value '{}' is written back",
                       w.input->name(), w.value->name()),
           w.input->type().bytes()});
    }
  }

  void list_entry_barriers() {
    for (const PlanStep& step : plan_.steps) {
      if (!step.op.op || step.group.empty() || !step.op.op->has(Tag::peer_written)) continue;
      auto& bs = plan_.entry_barriers;
      if (std::none_of(bs.begin(), bs.end(),
                       [&](const EntryBarrier& b) { return b.group == step.group; }))
        bs.push_back({step.group, &Registry::global().get("symm_mem::barrier")});
    }
  }

  Plan& plan_;
  const ir::Graph& graph_;
  std::unordered_map<const ir::Value*, int> id_;
};

}  // namespace

std::shared_ptr<const Plan> emit_plan(std::shared_ptr<ir::Graph> graph, MemoryPlan memory) {
  SF_CHECK(graph, "emit_plan: no graph");
  check_coverage(graph->nodes(), memory);
  auto plan = std::make_shared<Plan>();
  plan->pools = std::move(memory.pools);
  plan->buffers = std::move(memory.buffers);
  plan->buffer_of = std::move(memory.buffer_of);
  plan->events = std::move(memory.events);
  Builder(*plan, *graph).build();
  plan->graph = std::move(graph);
  return plan;
}

}  // namespace symmflow::passes
