// Plan::str(), the names of the copy enums and Plan::find_value (contract in
// include/symmflow/passes/plan.hpp). The plan prints like a program:
//     plan tp_mlp(x: f32[16, 64], w0: f32[64, 64]) {
//       pool regular: 4096 bytes (lower bound 4096, order start)
//       pool symm[tp]: 4096 bytes (lower bound 4096, order start)
//       0: h0 = aten::mm.out(x, w0) -> symm[tp]+0x0 f32[16, 64]
//       1: r0 = symm_mem::one_shot_all_reduce_out(h0, "sum", "tp") -> regular+0x0 f32[16, 64]
//       2: x_s = copy(x) -> symm[tp]+0x40 f32[16] # copy: graph input 'x' feeds ...
//       writeback x = x_2 # copy: ...
//       return r1
//     }
// A step calling an out variant prints the out variant's name; a view prints `-> view of <base>`;
// a value without memory (a view of a graph input) `-> caller memory`. Names, arguments and fused
// bodies are printed from the IR nodes the steps keep for printing.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "symmflow/ir/text.hpp"
#include "symmflow/passes/plan.hpp"

namespace symmflow::passes {

const char* copy_kind_name(CopyKind kind) {
  switch (kind) {
    case CopyKind::none: return "none";
    case CopyKind::input: return "input";
    case CopyKind::identity: return "identity";
    case CopyKind::functional: return "functional";
    case CopyKind::writeback: return "writeback";
  }
  return "?";
}

const char* copy_reason_name(CopyReason reason) {
  switch (reason) {
    case CopyReason::none: return "none";
    case CopyReason::graph_input_to_symm: return "graph_input_to_symm";
    case CopyReason::symm_placement: return "symm_placement";
    case CopyReason::strided_fused_input: return "strided_fused_input";
    case CopyReason::peer_race: return "peer_race";
    case CopyReason::old_value_needed: return "old_value_needed";
    case CopyReason::input_mutated: return "input_mutated";
  }
  return "?";
}

int Plan::find_value(std::string_view name) const {
  for (size_t v = 0; v < values.size(); ++v) {
    if (values[v].name == name) return int(v);
  }
  return -1;
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

std::string step_line(const Plan& plan, size_t s) {
  const PlanStep& step = plan.steps[s];
  const ir::Node& n = *step.node;
  auto where = [&](int id) -> std::string {
    const PlanValue& v = plan.values[size_t(id)];
    if (v.buffer < 0) return fmt::format("caller memory {}", v.type.str());
    const BufferPlan& b = plan.buffers[size_t(v.buffer)];
    if (b.pool < 0)
      return fmt::format("view of {} {}", plan.buffers[size_t(b.alias_of)].name, b.type.str());
    return fmt::format("{}+{:#x} {}", plan.pools[size_t(b.pool)].name, b.offset, b.type.str());
  };
  std::vector<std::string> names, places;
  for (int id : step.results) {
    names.push_back(plan.values[size_t(id)].name);
    places.push_back(where(id));
  }
  std::string callee = step.op.out_variant ? step.op.out_variant->name() : n.display_name();
  std::string line = fmt::format("  {}: ", s);
  if (!names.empty()) line += fmt::format("{} = ", fmt::join(names, ", "));
  line += fmt::format("{}({})", callee, args_text(n));
  if (step.kind == StepKind::fused) {
    std::vector<std::string> body;
    for (const ir::Node* b : step.body->nodes()) body.push_back(b->display_name());
    line += fmt::format(" [{}]", fmt::join(body, ", "));
  }
  if (!places.empty()) line += fmt::format(" -> {}", fmt::join(places, ", "));
  if (step.copy != CopyKind::none) line += fmt::format(" # copy: {}", step.reason);
  return line;
}

}  // namespace

std::string Plan::str() const {
  std::string out;
  std::vector<std::string> ins;
  for (int id : inputs)
    ins.push_back(values[size_t(id)].name + ": " + values[size_t(id)].type.str());
  out += fmt::format("plan {}({}) {{\n", graph->name(), fmt::join(ins, ", "));
  for (const PoolPlan& p : pools) {
    out += fmt::format("  pool {}: {} bytes (lower bound {}, order {})\n", p.name, p.bytes,
                       p.lower_bound, p.order);
  }
  for (size_t s = 0; s < steps.size(); ++s) out += step_line(*this, s) + "\n";
  for (const Writeback& w : writebacks) {
    const std::string& input = values[size_t(inputs[size_t(w.input)])].name;
    const std::string& value = values[size_t(w.value)].name;
    out += fmt::format("  writeback {} = {}", input, value);
    if (w.value != inputs[size_t(w.input)]) {
      out += fmt::format(" # copy: graph input '{}' is mutated: its final value '{}' is written "
                         "back",
                         input, value);
    }
    out += "\n";
  }
  std::vector<std::string> outs;
  for (int id : outputs) outs.push_back(values[size_t(id)].name);
  out += fmt::format("  return {}\n}}\n", fmt::join(outs, ", "));
  return out;
}

}  // namespace symmflow::passes
