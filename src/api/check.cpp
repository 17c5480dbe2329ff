// `symmflow run --check` for graph inputs: which inputs a run changes, and their final contents
// against the interpreter's (declared in symmflow/api/program.hpp).
//
// Expects: a CompiledProgram from compile(); got and want on the host.
// Guarantees: mutated_inputs lists, in input order and once each, every graph input that the
//   source program writes (a written argument of an op node; compile refuses a write through a
//   view) and every input the plan writes back, so an input that eager code changes is checked even when
//   the compiler lost its write-back, and one that the compiler writes back is checked even when
//   eager code leaves it alone. compare_mutated_input applies Note [check tolerance] with the
//   deeper of the input's rounding depths in the source graph and in the optimised graph (its
//   written-back value).
// Refuses: an input index out of range (InvalidUsage naming the program).
#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "symmflow/api/program.hpp"
#include "symmflow/exec/compare.hpp"
#include "symmflow/passes/plan.hpp"

namespace symmflow::api {

std::vector<size_t> mutated_inputs(const CompiledProgram& compiled) {
  const ir::Graph& g = compiled.source().graph();
  std::vector<bool> mutated(g.inputs().size(), false);
  std::unordered_map<const ir::Value*, size_t> input_of;
  for (size_t i = 0; i < g.inputs().size(); ++i) input_of[g.inputs()[i]] = i;
  auto mark = [&](const ir::Value* v) {
    if (auto it = input_of.find(v); it != input_of.end()) mutated[it->second] = true;
  };
  for (const ir::Node* n : g.nodes()) {
    if (n->kind() != ir::NodeKind::op) continue;
    for (int w : n->op()->aliases().written_args) {
      const ir::Arg& a = n->args().at(size_t(w));
      if (a.kind == ir::Arg::Kind::value) mark(a.value);
      for (const ir::Value* v : a.values) mark(v);
    }
  }
  for (const passes::Writeback& w : compiled.plan()->writebacks) mutated.at(size_t(w.input)) = true;
  std::vector<size_t> out;
  for (size_t i = 0; i < mutated.size(); ++i) {
    if (mutated[i]) out.push_back(i);
  }
  return out;
}

OutputComparison compare_mutated_input(const CompiledProgram& compiled, size_t i,
                                       const Tensor& got, const Tensor& want,
                                       const std::string& context) {
  const ir::Graph& g = compiled.source().graph();
  SF_CHECK(i < g.inputs().size(), "compare_mutated_input: program '{}' has {} inputs, not {}",
           g.name(), g.inputs().size(), i + 1);
  const ir::Value* input = g.inputs()[i];
  int depth = exec::rounding_depth(g, input);
  const ir::Graph& optimised = *compiled.plan()->graph;
  for (const auto& w : optimised.writebacks()) {
    if (size_t(w.input->index()) == i)
      depth = std::max(depth, exec::rounding_depth(optimised, w.value));
  }
  exec::Comparison c = exec::compare(
      got, want, exec::check_tolerance(want.dtype(), depth),
      fmt::format("input {} ('{}', mutated, {} rounding ops deep) {}", i, input->name(), depth,
                  context));
  return {c.mismatch, c.worst};
}

}  // namespace symmflow::api
