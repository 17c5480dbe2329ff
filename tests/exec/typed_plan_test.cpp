// The typed plan (Note [typed plan] in passes/plan.hpp): what emit_plan resolves into each step,
// and an Executable that runs a plan whose IR attributes were stripped after emit_plan, which
// only works because exec reads the typed steps (the staging copy-in and the out variants are
// attributes in the IR).
#include <cstring>

#include <gtest/gtest.h>

#include "support/graphs.hpp"
#include "support/tensors.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/interpret.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow {
namespace {

using passes::CopyKind;
using passes::CopyReason;
using passes::Operand;
using passes::PlanStep;
using passes::StepKind;

const char* kStagedSource = R"sf(group tp
graph g(x: f32[8, 4], y: f32[8, 4]) {
  r = symm_mem::one_shot_all_reduce(x, "sum", "tp")
  b = aten::mul.Tensor(r, y)
  return b
}
)sf";
const char* kStagedPlanned = R"sf(group tp
graph g(x: f32[8, 4], y: f32[8, 4]) {
  x_s = copy(x) @ symm[tp] {copy = "input", reason = "graph input 'x' feeds symm arg 'input' of symm_mem::one_shot_all_reduce (group tp)"}
  r = symm_mem::one_shot_all_reduce(x_s, "sum", "tp") @ regular {out_variant = "symm_mem::one_shot_all_reduce_out"}
  b = aten::mul.Tensor(r, y) @ regular {out_variant = "aten::mul.out"}
  return b
}
)sf";

TEST(TypedPlan, StepsCarryResolvedOpsOperandsCopiesAndAlgorithms) {
  auto plan = testing::plan_text(kStagedPlanned, 4);
  ASSERT_EQ(plan->steps.size(), 3u);
  ASSERT_EQ(plan->inputs, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan->values[0].name, "x");
  EXPECT_EQ(plan->values[0].graph_input, 0);
  EXPECT_EQ(plan->values[0].buffer, -1);  // caller memory
  const PlanStep& copy = plan->steps[0];
  EXPECT_EQ(copy.kind, StepKind::copy);
  EXPECT_EQ(copy.copy, CopyKind::input);
  EXPECT_EQ(copy.cause, CopyReason::graph_input_to_symm);
  EXPECT_EQ(copy.reason,
            "graph input 'x' feeds symm arg 'input' of symm_mem::one_shot_all_reduce (group tp)");
  EXPECT_EQ(copy.copy_bytes, 128u);
  ASSERT_EQ(copy.args.size(), 1u);
  EXPECT_EQ(copy.args[0].value, 0);
  const int x_s = copy.results.at(0);
  EXPECT_EQ(plan->values[size_t(x_s)].name, "x_s");
  EXPECT_EQ(plan->values[size_t(x_s)].buffer, plan->buffer_of.at(plan->graph->find_value("x_s")));

  const PlanStep& reduce = plan->steps[1];
  EXPECT_EQ(reduce.kind, StepKind::call);
  EXPECT_EQ(reduce.op.op, &Registry::global().get("symm_mem::one_shot_all_reduce"));
  EXPECT_EQ(reduce.op.out_variant, &Registry::global().get("symm_mem::one_shot_all_reduce_out"));
  EXPECT_EQ(reduce.op.called(), reduce.op.out_variant);
  ASSERT_EQ(reduce.args.size(), 4u);  // bound to the out variant's schema
  EXPECT_EQ(reduce.args[0].value, x_s);
  EXPECT_EQ(reduce.args[1].literal.to_string(), "sum");
  EXPECT_EQ(reduce.args[3].kind, Operand::Kind::value);
  EXPECT_EQ(reduce.args[3].value, reduce.results.at(0));  // the out arg is the result
  EXPECT_EQ(reduce.written, std::vector<int>{3});
  EXPECT_EQ(reduce.group, "tp");
  EXPECT_EQ(reduce.group_size, 4);
  EXPECT_EQ(reduce.bytes, 128);
  EXPECT_EQ(reduce.algorithm.cpu, "one_shot");
  EXPECT_EQ(reduce.algorithm.cuda, "one_shot_ll");
  EXPECT_EQ(reduce.copy, CopyKind::none);

  const PlanStep& mul = plan->steps[2];
  EXPECT_EQ(mul.op.called(), &Registry::global().get("aten::mul.out"));
  EXPECT_TRUE(mul.group.empty());
  EXPECT_TRUE(mul.algorithm.cpu.empty());
  EXPECT_EQ(plan->outputs, std::vector<int>{mul.results.at(0)});
  EXPECT_TRUE(plan->entry_barriers.empty());  // no peer-written buffer
  ASSERT_EQ(plan->copies.size(), 1u);
  EXPECT_EQ(plan->copies[0].kind, CopyKind::input);
  EXPECT_STREQ(passes::copy_kind_name(plan->copies[0].kind), "input");
}

TEST(TypedPlan, FunctionalStepsAndEntryBarriers) {
  auto plan = testing::plan_text(R"sf(group tp
graph p(x: f32[8]) {
  b = aten::neg(x) @ symm[tp]
  d = aten::sin(x) @ symm[tp]
  d_1 = functional<symm_mem::put_signal>(b, d, rank+1, 0, "tp") @ symm[tp]
  e = aten::cos(d_1) @ regular
  return e
})sf",
                                 2);
  const PlanStep& put = plan->steps[2];
  EXPECT_EQ(put.kind, StepKind::functional);
  EXPECT_EQ(put.op.op, &Registry::global().get("symm_mem::put_signal"));
  EXPECT_EQ(put.op.out_variant, nullptr);
  EXPECT_EQ(put.args[2].kind, Operand::Kind::rank_relative);  // resolved per rank by exec
  EXPECT_EQ(put.args[2].rank_offset, 1);
  ASSERT_EQ(put.new_values.size(), 1u);
  EXPECT_EQ(put.new_values[0].first, 1);  // dst
  EXPECT_EQ(plan->values[size_t(put.new_values[0].second)].name, "d_1");
  EXPECT_EQ(put.copy, CopyKind::functional);
  EXPECT_EQ(put.cause, CopyReason::old_value_needed);
  EXPECT_EQ(put.copy_bytes, 32u);
  EXPECT_EQ(put.algorithm.cpu, "push+signal");
  ASSERT_EQ(plan->entry_barriers.size(), 1u);  // put_signal is peer_written
  EXPECT_EQ(plan->entry_barriers[0].group, "tp");
  EXPECT_EQ(plan->entry_barriers[0].op, &Registry::global().get("symm_mem::barrier"));
}

// Exec reads only typed steps: with every IR attribute gone ("copy", "reason", "out_variant"),
// the copy-in is still recognised (zero-copy binding skips it) and the out variants still run.
TEST(TypedPlan, ExecutableRunsAPlanWhoseIrAttributesWereStripped) {
  const int w = 2;
  auto plan = testing::plan_text(kStagedPlanned, w);
  for (ir::Node* n : plan->graph->nodes()) n->attrs().clear();
  std::shared_ptr<const ir::Graph> source = testing::parse(kStagedSource, w);
  run_threads(w, [&](Runtime& rt) {
    exec::Executable exe(plan);
    Tensor handle = exe.input_handle(0);
    EXPECT_EQ(handle.raw_data(), exe.buffer("x_s").raw_data());  // the staging buffer
    Tensor x = testing::make_input({8, 4}, DType::f32, rt.rank(), 1),
           y = testing::make_input({8, 4}, DType::f32, rt.rank(), 2);
    std::vector<Tensor> want = exec::interpret(*source, {x, y});
    std::memcpy(handle.raw_data(), x.raw_data(), x.nbytes());
    std::vector<Tensor> got = exe.run({handle, y}, {exec::OutputMode::view, {}});
    testing::expect_same(got[0], want[0], "b");
    EXPECT_EQ(exe.last_stats().input_copies_skipped, 1u);
    EXPECT_EQ(exe.last_stats().copies, 0u);
    EXPECT_EQ(got[0].raw_data(), exe.buffer("b").raw_data());  // mul.out wrote the planned buffer
  });
}

}  // namespace
}  // namespace symmflow
