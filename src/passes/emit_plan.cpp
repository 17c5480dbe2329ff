// emit_plan: packages a scheduled graph and its memory plan as a Plan.
//
// Expects: `memory` = plan_memory(*graph) for this graph, unchanged since.
// Guarantees: steps = the graph's nodes in order; pools, buffers, buffer_of and events taken from
//   the memory plan; copies lists every copy the compiler added, in step order: each `copy` node
//   (kind attrs["copy"], "identity" when absent; bytes of its output), each remaining
//   functional<op> node (kind "functional"; bytes of its written arguments), and each writeback
//   whose value is not the input itself (kind "writeback", step = steps.size()).
//   Plan::str() prints the plan like a program:
//     plan tp_mlp(x: f32[16, 64], w0: f32[64, 64]) {
//       pool regular: 4096 bytes (lower bound 4096, order start)
//       pool symm[tp]: 4096 bytes (lower bound 4096, order start)
//       0: h0 = aten::mm.out(x, w0) -> symm[tp]+0x0 f32[16, 64]
//       1: r0 = symm_mem::one_shot_all_reduce_out(h0, "sum", "tp") -> regular+0x0 f32[16, 64]
//       2: x_s = copy(x) -> symm[tp]+0x40 f32[16] # copy: graph input 'x' feeds ...
//       writeback x = x_2 # copy: ...
//       return r1
//     }
//   A view prints `-> view of <base>` ; a value without memory (a view of a graph input)
//   `-> caller memory`.
// Refuses: a memory plan that does not cover the graph (InvalidUsage).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "symmflow/ir/text.hpp"
#include "symmflow/passes/plan_memory.hpp"

namespace symmflow::passes {

std::shared_ptr<const Plan> emit_plan(std::shared_ptr<ir::Graph> graph, MemoryPlan memory) {
  SF_CHECK(graph, "emit_plan: no graph");
  auto plan = std::make_shared<Plan>();
  plan->steps.assign(graph->nodes().begin(), graph->nodes().end());
  for (const ir::Node* n : plan->steps) {
    for (const ir::Value* v : n->outputs()) {
      bool input_view = false;
      if (n->kind() == ir::NodeKind::op) {
        int a = n->op()->aliases().returns_alias.at(size_t(v->index()));
        input_view = a >= 0 && n->args()[size_t(a)].kind == ir::Arg::Kind::value &&
                     !memory.buffer_of.count(n->args()[size_t(a)].value);
      }
      SF_CHECK(input_view || memory.buffer_of.count(v),
               "emit_plan: value '{}' of {} has no buffer (the memory plan is not of this graph)",
               v->name(), n->display_name());
    }
  }
  for (size_t s = 0; s < plan->steps.size(); ++s) {
    const ir::Node* n = plan->steps[s];
    if (n->kind() == ir::NodeKind::copy) {
      CopyInfo c;
      c.step = int(s);
      auto kind = n->attrs().find("copy");
      c.kind = kind != n->attrs().end() ? kind->second : "identity";
      auto reason = n->attrs().find("reason");
      c.reason = reason != n->attrs().end() ? reason->second : "";
      c.bytes = n->output()->type().bytes();
      plan->copies.push_back(std::move(c));
    } else if (n->kind() == ir::NodeKind::functional) {
      CopyInfo c;
      c.step = int(s);
      c.kind = "functional";
      std::vector<std::string> written;
      for (int w : n->op()->aliases().written_args) {
        const ir::Arg& a = n->args()[size_t(w)];
        for (const ir::Value* v :
             a.kind == ir::Arg::Kind::value ? std::vector<ir::Value*>{a.value} : a.values) {
          c.bytes += v->type().bytes();
          written.push_back(v->name());
        }
      }
      auto reason = n->attrs().find("reason");
      c.reason = reason != n->attrs().end()
                     ? reason->second
                     : fmt::format("{} writes {} whose old value is still needed",
                                   n->display_name(), fmt::join(written, ", "));
      plan->copies.push_back(std::move(c));
    }
  }
  for (const auto& w : graph->writebacks()) {
    if (w.value == w.input) continue;
    plan->copies.push_back(
        {int(plan->steps.size()), "writeback",
         fmt::format("graph input '{}' is mutated: its final value '{}' is written back",
                     w.input->name(), w.value->name()),
         w.input->type().bytes()});
  }
  plan->pools = std::move(memory.pools);
  plan->buffers = std::move(memory.buffers);
  plan->buffer_of = std::move(memory.buffer_of);
  plan->events = std::move(memory.events);
  plan->graph = std::move(graph);
  return plan;
}

namespace {

std::string arg_text(const ir::Arg& a) {
  switch (a.kind) {
    case ir::Arg::Kind::value:
      return a.value->name();
    case ir::Arg::Kind::value_list: {
      std::vector<std::string> names;
      for (const ir::Value* v : a.values) names.push_back(v->name());
      return fmt::format("[{}]", fmt::join(names, ", "));
    }
    case ir::Arg::Kind::literal:
      return ir::print_literal(a.literal);
    case ir::Arg::Kind::rank_relative:
      return ir::rank_relative_text(a.rank_offset);
  }
  return "";
}

std::string args_text(const ir::Node& n) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < n.args().size(); ++i) {
    const ir::Arg& a = n.args()[i];
    if (a.defaulted) continue;
    std::string text = arg_text(a);
    if (n.op() && n.op()->schema().args[i].kwarg_only)
      text = n.op()->schema().args[i].name + "=" + text;
    parts.push_back(std::move(text));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

std::string Plan::str() const {
  std::string out;
  std::vector<std::string> ins;
  for (const ir::Value* v : graph->inputs()) ins.push_back(v->name() + ": " + v->type().str());
  out += fmt::format("plan {}({}) {{\n", graph->name(), fmt::join(ins, ", "));
  for (const PoolPlan& p : pools) {
    out += fmt::format("  pool {}: {} bytes (lower bound {}, order {})\n", p.name, p.bytes,
                       p.lower_bound, p.order);
  }
  auto where = [&](const ir::Value* v) -> std::string {
    auto it = buffer_of.find(v);
    if (it == buffer_of.end()) return fmt::format("caller memory {}", v->type().str());
    const BufferPlan& b = buffers[size_t(it->second)];
    if (b.pool < 0)
      return fmt::format("view of {} {}", buffers[size_t(b.alias_of)].name, b.type.str());
    return fmt::format("{}+{:#x} {}", pools[size_t(b.pool)].name, b.offset, b.type.str());
  };
  std::vector<std::string> copy_note(steps.size());
  for (const CopyInfo& c : copies) {
    if (c.step >= 0 && size_t(c.step) < steps.size()) copy_note[size_t(c.step)] = c.reason;
  }
  for (size_t s = 0; s < steps.size(); ++s) {
    const ir::Node& n = *steps[s];
    std::vector<std::string> names, places;
    for (const ir::Value* v : n.outputs()) {
      names.push_back(v->name());
      places.push_back(where(v));
    }
    std::string callee = n.display_name();
    auto ov = n.attrs().find("out_variant");
    if (n.kind() == ir::NodeKind::op && ov != n.attrs().end()) callee = ov->second;
    std::string line = fmt::format("  {}: ", s);
    if (!names.empty()) line += fmt::format("{} = ", fmt::join(names, ", "));
    line += fmt::format("{}({})", callee, args_text(n));
    if (n.kind() == ir::NodeKind::fused) {
      std::vector<std::string> body;
      for (const ir::Node* b : n.body()->nodes()) body.push_back(b->display_name());
      line += fmt::format(" [{}]", fmt::join(body, ", "));
    }
    if (!places.empty()) line += fmt::format(" -> {}", fmt::join(places, ", "));
    if (n.kind() == ir::NodeKind::copy || n.kind() == ir::NodeKind::functional)
      line += fmt::format(" # copy: {}", copy_note[s]);
    out += line + "\n";
  }
  for (const auto& w : graph->writebacks()) {
    out += fmt::format("  writeback {} = {}", w.input->name(), w.value->name());
    if (w.value != w.input)
      out +=
          fmt::format(" # copy: graph input '{}' is mutated: its final value '{}' is written back",
                      w.input->name(), w.value->name());
    out += "\n";
  }
  std::vector<std::string> outs;
  for (const ir::Value* v : graph->outputs()) outs.push_back(v->name());
  out += fmt::format("  return {}\n}}\n", fmt::join(outs, ", "));
  return out;
}

}  // namespace symmflow::passes
