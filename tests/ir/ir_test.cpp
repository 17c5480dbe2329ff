// The IR: builder, use lists, text format fixed point, parse errors and the verifier.
#include <gtest/gtest.h>

#include "support/errors.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/ir/verify.hpp"

namespace symmflow::ir {
namespace {

const char* kMlp = R"(# a comment
group tp
group pair(2)
graph tp_mlp(x: f32[16, 64], w0: f32[64, 64] @ regular, w1: f32[64, 64]) {
  h0 = aten::mm(x, w0) @ symm[tp]
  r0 = symm_mem::one_shot_all_reduce(h0, "sum", "tp")   # trailing comment
  h1 = aten::mm(r0, w1)
  y = aten::add(h1, r0, alpha=2)
  z = aten::mul(y, 0.5)
  symm_mem::two_shot_all_reduce_(z, "avg", "pair")
  s = aten::sum(z, [1], True)
  c = aten::cat([s, s], 1)
  t = aten::_to_copy(c, dtype=bf16)
  f = fused(y, z) {
    a = aten::sin(y)
    b = aten::mul.Tensor(a, z)
    return b
  }
  g = copy(f) {reason = "a \"quoted\" reason"}
  z1 = functional<symm_mem::two_shot_all_reduce_>(g, "sum", "tp")
  writeback x = x
  return r0, t, z1
}
)";

// The diagnostics of parsing `text` (DiagnosticError's text), or "<no error>".
std::string error_of(const std::string& text, int world = 4) {
  return testing::error_of([&] { parse_graph(text, {"g.sf", world}); });
}

TEST(Text, PrintParseIsAFixedPoint) {
  auto g = parse_graph(kMlp, {"mlp.sf", 4});
  std::string printed = print_graph(*g);
  auto again = parse_graph(printed, {"printed.sf", 4});
  EXPECT_EQ(print_graph(*again), printed);
  EXPECT_NE(printed.find("y = aten::add.Tensor(h1, r0, alpha=2)"), std::string::npos) << printed;
  EXPECT_NE(printed.find("z = aten::mul.Scalar(y, 0.5)"), std::string::npos);
  EXPECT_NE(printed.find("s = aten::sum.dim_IntList(z, [1], True)"), std::string::npos);
  EXPECT_NE(printed.find("t = aten::_to_copy(c, dtype=bf16)"), std::string::npos);
  EXPECT_NE(printed.find("h0 = aten::mm(x, w0) @ symm[tp]"), std::string::npos);
  EXPECT_NE(printed.find("w0: f32[64, 64] @ regular"), std::string::npos);
  EXPECT_NE(printed.find("g = copy(f) {reason = \"a \\\"quoted\\\" reason\"}"), std::string::npos);
  EXPECT_NE(printed.find("group pair(2)\n"), std::string::npos);
  EXPECT_NE(printed.find("  writeback x = x\n"), std::string::npos);
  EXPECT_TRUE(verify_graph(*g).empty());
}

TEST(Text, TypesComeFromShapeFunctions) {
  auto g = parse_graph(kMlp, {"mlp.sf", 4});
  EXPECT_EQ(g->find_value("h0")->type().str(), "f32[16, 64]");
  EXPECT_EQ(g->find_value("s")->type().str(), "f32[16, 1]");
  EXPECT_EQ(g->find_value("c")->type().str(), "f32[16, 2]");
  EXPECT_EQ(g->find_value("t")->type().str(), "bf16[16, 2]");
  EXPECT_EQ(g->find_value("z1")->type().str(), "f32[16, 64]");
  EXPECT_EQ(g->group_size("pair"), 2);
  EXPECT_EQ(g->group_size("tp"), 4);
  const Node* f = g->find_value("f")->producer();
  EXPECT_EQ(f->kind(), NodeKind::fused);
  EXPECT_EQ(f->body()->nodes().size(), 2u);
  EXPECT_EQ(g->find_value("h0")->uses().size(), 1u);
  EXPECT_EQ(g->find_value("r0")->uses().size(), 2u);
}

TEST(Text, ErrorsPointAtLineAndColumn) {
  EXPECT_EQ(error_of("graph g(x: f32[4]) {\n  y = aten::relu(x\n  return y\n}\n"),
            "g.sf:3:3: error: expected ',' but found 'return'\n    return y\n    ^");
  EXPECT_EQ(error_of("graph g(x: q32[4]) {\n  return x\n}\n"),
            "g.sf:1:12: error: unknown dtype 'q32'\n  graph g(x: q32[4]) {\n             ^");
  EXPECT_EQ(error_of("graph g(x: f32[4]) {\n  y = aten::relu(x)\n"),
            "g.sf:3:1: error: expected 'return' but found end of input");
  EXPECT_EQ(error_of("group tp(3)\ngraph g(x: f32[4]) {\n  return x\n}\n"),
            "g.sf:1:1: error: group 'tp': blocks of 3 ranks do not divide the world of 4 ranks\n"
            "  group tp(3)\n  ^");
  EXPECT_EQ(error_of("graph g(x: f32[4]) {\n  a, b = aten::relu(x)\n  return a\n}\n"),
            "g.sf:2:10: error: aten::relu returns 1 value but 2 names are assigned\n"
            "    a, b = aten::relu(x)\n           ^");
  EXPECT_EQ(error_of("graph g(x: f32[4]) {\n  y = aten::relu(x) @ symm\n  return y\n}\n"),
            "g.sf:3:3: error: expected '[' but found 'return'\n    return y\n    ^");
  EXPECT_EQ(error_of("graph g(x: f32[4]) {\n  y = aten::relu(x) $\n  return y\n}\n"),
            "g.sf:2:21: error: unexpected character '$'\n    y = aten::relu(x) $\n                 "
            "     ^");
}

TEST(Builder, AddOpBindsTypesAndKeepsUseLists) {
  Graph g("b", 2);
  Value* x = g.add_input("x", {DType::f32, {4, 8}});
  Value* w = g.add_input("w", {DType::f32, {8, 3}});
  Node* mm = g.add_op("aten::mm", {Arg::of(x), Arg::of(w)}, {}, "h");
  Value* h = mm->output();
  EXPECT_EQ(h->name(), "h");
  EXPECT_EQ(h->type().str(), "f32[4, 3]");
  Node* relu = g.add_op("aten::relu", {Arg::of(h)}, {}, "h");  // name taken: a fresh one
  EXPECT_EQ(relu->output()->name(), "h_1");
  g.set_outputs({relu->output()});
  EXPECT_EQ(h->uses(), std::vector<Node*>{relu});
  Node* neg = g.add_op("aten::neg", {Arg::of(h)}, {}, "n", relu);  // inserted before relu
  EXPECT_EQ(g.position(neg), 1u);
  g.replace_uses(h, neg->output(), g.position(relu));
  EXPECT_EQ(relu->args()[0].value, neg->output());
  EXPECT_EQ(h->uses(), std::vector<Node*>{neg});
  EXPECT_TRUE(verify_graph(g).empty());
  try {
    g.erase(neg);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "cannot erase aten::neg: its output 'n' is still used");
  }
  try {
    g.add_op("aten::mm", {Arg::of(x), Arg::of(x)});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "aten::mm: self has shape [4, 8] and mat2 has shape [4, 8]; inner "
                 "dimensions 8 and 4 differ");
  }
  EXPECT_EQ(print_graph(g),
            "graph b(x: f32[4, 8], w: f32[8, 3]) {\n  h = aten::mm(x, w)\n  n = aten::neg(h)\n"
            "  h_1 = aten::relu(n)\n  return h_1\n}\n");
}

TEST(Verify, CatchesWrongTypesUndeclaredLayoutsAndOrder) {
  auto g = parse_graph(
      "group tp\ngraph g(x: f32[4, 4]) {\n  y = aten::mm(x, x)\n"
      "  r = symm_mem::one_shot_all_reduce(y, \"sum\", \"tp\")\n  return r\n}\n",
      {"g.sf", 2});
  g->find_value("y")->set_type({DType::f32, {4, 5}});
  g->find_value("y")->set_layout(Layout::regular());
  g->find_value("r")->set_layout(Layout::symm("dp"));
  std::vector<Diagnostic> d = verify_graph(*g);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].message, "type of 'y' is f32[4, 5] but aten::mm gives f32[4, 4]");
  EXPECT_EQ(d[0].loc.line, 3);
  EXPECT_EQ(d[1].message,
            "symm_mem::one_shot_all_reduce: symm argument 'input' must be in symm[tp] but 'y' is "
            "in regular");
  EXPECT_EQ(d[2].message,
            "type of 'r' is f32[4, 4] but symm_mem::one_shot_all_reduce gives f32[4, 5]");
  EXPECT_EQ(d[3].message, "'r' is in symm[dp] but group 'dp' is not declared");
  Node* mm = g->find_value("y")->producer();
  Node* ar = g->find_value("r")->producer();
  g->reorder({ar, mm});
  d = verify_graph(*g);
  EXPECT_EQ(d[0].message, "symm_mem::one_shot_all_reduce uses 'y' before it is defined");
}

// Note [rank-relative arguments]: printed as written, a fixed point; the verifier refuses one that
// a pass (not the builder, which checks too) puts where an int is not expected.
TEST(RankRelative, RoundTripsAndIsVerified) {
  const char* text =
      "group ring\ngraph g(x: f32[4, 4], buf: f32[4, 4]) {\n"
      "  symm_mem::put_signal(x, buf, rank+1, 0, \"ring\")\n"
      "  symm_mem::wait_signal(buf, rank-1, 0, \"ring\")\n"
      "  p = symm_mem::collective_permute(x, rank-0, \"ring\")\n  return p\n}\n";
  auto g = parse_graph(text, {"g.sf", 4});
  std::string printed = print_graph(*g);
  EXPECT_NE(printed.find("put_signal(x, buf, rank+1, 0, \"ring\")"), std::string::npos) << printed;
  EXPECT_NE(printed.find("wait_signal(buf, rank-1, 0, \"ring\")"), std::string::npos) << printed;
  EXPECT_NE(printed.find("collective_permute(x, rank+0, \"ring\")"), std::string::npos) << printed;
  EXPECT_EQ(print_graph(*parse_graph(printed, {"printed.sf", 4})), printed);
  EXPECT_TRUE(verify_graph(*g).empty());
  Node* put = g->nodes()[0];
  put->set_arg(4, Arg::of_rank(2));  // group_name: a str
  std::vector<Diagnostic> d = verify_graph(*g);
  ASSERT_EQ(d.size(), 2u);  // the argument, and the group that is no longer a literal
  EXPECT_EQ(
      d[0].message,
      "symm_mem::put_signal: argument 'group_name' is str, but a rank-relative value (rank+2) "
      "can only be an int argument");
  EXPECT_EQ(d[0].loc.line, 3);
  EXPECT_NE(
      error_of("graph g(x: f32[4]) {\n  y = aten::mul.Scalar(x, rank+1)\n  return y\n}\n")
          .find("argument 'other' is Scalar, but a rank-relative value (rank+1) can only be an "
                "int argument"),
      std::string::npos);
}

}  // namespace
}  // namespace symmflow::ir
