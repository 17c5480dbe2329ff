// The rewrite-pattern driver and registry (Note [plugin rewrite patterns]): patterns applied to a
// fixed point in order, a pattern that never erases its root refused instead of looping, bad
// registrations reported with the pattern's name and file:line, and the pipeline's slot
// `rewrite_patterns` running registered patterns right after functionalize.
#include <algorithm>

#include <gtest/gtest.h>

#include "symmflow/ir/text.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/passes/rewrite_patterns.hpp"

namespace symmflow {
namespace {

using passes::RewritePattern;

const char* kNegNeg = R"sf(graph g(x: f32[4]) {
  a = aten::neg(x)
  b = aten::neg(a)
  c = aten::neg(b)
  d = aten::neg(c)
  e = aten::relu(d)
  return e
}
)sf";

// neg(neg(v)) -> v: the outer neg is the root; the inner one goes when it has no other use.
bool cancel_negs(ir::Graph& g, ir::Node& outer) {
  ir::Value* inner_out = outer.args()[0].value;
  ir::Node* inner = inner_out->producer();
  if (!inner || inner->kind() != ir::NodeKind::op || inner->op()->name() != "aten::neg" ||
      inner_out->uses().size() != 1)
    return false;
  g.replace_uses(outer.output(), inner->args()[0].value);
  g.erase(&outer);
  g.erase(inner);
  return true;
}

TEST(RewritePatterns, AppliedToAFixedPointInOrder) {
  std::unique_ptr<ir::Graph> g = ir::parse_graph(kNegNeg);
  std::vector<RewritePattern> patterns = {{"test::cancel_negs", "aten::neg", cancel_negs, ""}};
  EXPECT_EQ(passes::apply_rewrite_patterns(*g, patterns), 2);
  EXPECT_EQ(ir::print_graph(*g), "graph g(x: f32[4]) {\n  e = aten::relu(x)\n  return e\n}\n");
  EXPECT_EQ(passes::apply_rewrite_patterns(*g, patterns), 0);  // nothing left to match
}

TEST(RewritePatterns, OnlyTheRootOpIsTried) {
  std::unique_ptr<ir::Graph> g = ir::parse_graph(kNegNeg);
  int tried = 0;
  std::vector<RewritePattern> patterns = {
      {"test::count", "aten::relu", [&](ir::Graph&, ir::Node& n) {
         EXPECT_EQ(n.op()->name(), "aten::relu");
         ++tried;
         return false;
       }, ""}};
  EXPECT_EQ(passes::apply_rewrite_patterns(*g, patterns), 0);
  EXPECT_EQ(tried, 1);
}

TEST(RewritePatterns, APatternThatKeepsItsRootIsRefused) {
  std::unique_ptr<ir::Graph> g = ir::parse_graph(kNegNeg);
  std::vector<RewritePattern> patterns = {
      {"test::liar", "aten::relu", [](ir::Graph&, ir::Node&) { return true; }, ""}};
  try {
    passes::apply_rewrite_patterns(*g, patterns);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
    EXPECT_EQ(std::string(e.what()),
              "rewrite pattern 'test::liar' rewrote graph 'g' more than 5 times (the nodes it "
              "had): a rewrite that returns true must erase its root node");
  }
}

TEST(RewritePatterns, BadRegistrationsNameThePatternAndWhere) {
  passes::detail::queue_rewrite_pattern({"test::no_root", "nope::x", cancel_negs, ""}, "a.cpp", 7);
  passes::detail::queue_rewrite_pattern({"test::no_fn", "aten::neg", {}, ""}, "b.cpp", 8);
  try {
    passes::registered_rewrite_patterns();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "rewrite pattern 'test::no_root' (a.cpp:7): root op 'nope::x' is not registered\n"
              "rewrite pattern 'test::no_fn' (b.cpp:8) has no rewrite function");
  }
  // Dropped: the registry is usable again.
  for (const RewritePattern& p : passes::registered_rewrite_patterns())
    EXPECT_NE(p.name.rfind("test::no_", 0), 0u) << p.name;
}

// Registered globally (for the rest of this process): tried at every aten::sigmoid, never
// rewrites, records the pass order it saw.
int g_sigmoid_calls = 0;
bool count_sigmoid(ir::Graph&, ir::Node&) {
  ++g_sigmoid_calls;
  return false;
}
SYMMFLOW_REWRITE_PATTERN(test, count_sigmoid, "aten::sigmoid", count_sigmoid, "counts sigmoids");

TEST(RewritePatterns, RegisteredPatternsRunInThePipelineSlotAfterFunctionalize) {
  std::vector<RewritePattern> all = passes::registered_rewrite_patterns();
  ASSERT_EQ(std::count_if(all.begin(), all.end(),
                          [](const RewritePattern& p) { return p.name == "test::count_sigmoid"; }),
            1);
  // A duplicate name is refused.
  passes::detail::queue_rewrite_pattern({"test::count_sigmoid", "aten::sigmoid", count_sigmoid, ""},
                                        "c.cpp", 9);
  try {
    passes::registered_rewrite_patterns();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "rewrite pattern 'test::count_sigmoid' (c.cpp:9) is registered twice");
  }
  std::vector<std::string> order;
  for (const passes::PassInfo& p : passes::graph_passes()) order.push_back(p.name);
  ASSERT_GE(order.size(), 7u);
  EXPECT_EQ(order[1], "functionalize");
  EXPECT_EQ(order[2], "rewrite_patterns");
  EXPECT_EQ(order[3], "raise_rms_norm");
  EXPECT_EQ(order[4], "raise_rotary");
  EXPECT_EQ(order[5], "raise_gqa");
  EXPECT_EQ(order[6], "fuse_allreduce_rmsnorm");
  g_sigmoid_calls = 0;
  passes::CompileOptions options;
  std::vector<std::string> seen;
  options.after_pass = [&](const std::string& pass, const ir::Graph&) {
    seen.push_back(pass + ":" + std::to_string(g_sigmoid_calls));
  };
  passes::compile(ir::parse_graph("graph g(x: f32[4]) {\n  y = aten::sigmoid(x)\n  return y\n}\n"),
                  options);
  ASSERT_GE(seen.size(), 2u);
  EXPECT_EQ(seen[0], "functionalize:0");
  EXPECT_EQ(seen[1], "rewrite_patterns:1");
}

}  // namespace
}  // namespace symmflow
