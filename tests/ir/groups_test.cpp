// Explicit groups (issue 16 item 3, Note [explicit groups] in src/ir/graph.cpp): the text form
// `group dp = {0, 2}, {1, 3}`, its diagnostics at line and column, the printer's round trip, the
// builder form and the verifier's refusal of an op on a group that leaves ranks out.
#include <gtest/gtest.h>

#include "support/errors.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/ir/verify.hpp"

namespace symmflow::ir {
namespace {

const char* kTpDp = R"(group tp = {0, 1}, {2, 3}
group dp = {0, 2}, {1, 3}
group ring = {3, 1, 0, 2}
graph g(x: f32[4, 8]) {
  y = symm_mem::one_shot_all_reduce(x, "sum", "tp")
  z = symm_mem::one_shot_all_reduce(y, "sum", "dp")
  return z
}
)";

std::string error_of(const std::string& text, int world = 4) {
  return testing::error_of([&] { verify_or_throw(*parse_graph(text, {"g.sf", world}), "g.sf", text); });
}

std::string with_graph(const std::string& groups) {
  return groups + "graph g(x: f32[4]) {\n  return x\n}\n";
}

TEST(ExplicitGroups, ParseSizesMembersAndRoundTrip) {
  std::unique_ptr<Graph> g = parse_graph(kTpDp, {"g.sf", 4});
  const GroupDecl* dp = g->find_group("dp");
  ASSERT_NE(dp, nullptr);
  EXPECT_EQ(dp->subgroups, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(g->group_size("dp"), 2);
  EXPECT_EQ(g->group_size("ring"), 4);
  EXPECT_EQ(dp->members_of(3, 4), (std::vector<int>{1, 3}));
  EXPECT_EQ(g->find_group("ring")->members_of(2, 4), (std::vector<int>{3, 1, 0, 2}));
  EXPECT_EQ(g->find_group("world")->members_of(2, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(dp->ranks_outside(4).empty());
  EXPECT_TRUE(verify_graph(*g).empty());
  std::string printed = print_graph(*g);
  EXPECT_EQ(printed, kTpDp);
  EXPECT_EQ(print_graph(*parse_graph(printed, {"g.sf", 4})), printed);
}

TEST(ExplicitGroups, DiagnosticsPointAtTheRank) {
  EXPECT_EQ(error_of(with_graph("group dp = {0, 5}, {1, 3}\n")),
            "g.sf:1:16: error: group 'dp': rank 5 is outside the world of 4 ranks\n"
            "  group dp = {0, 5}, {1, 3}\n"
            "                 ^");
  EXPECT_EQ(error_of(with_graph("group dp = {0, 2}, {2, 3}\n")),
            "g.sf:1:21: error: group 'dp': rank 2 is already in subgroup {0, 2} (a rank is in at "
            "most one subgroup of a group)\n"
            "  group dp = {0, 2}, {2, 3}\n"
            "                      ^");
  EXPECT_EQ(error_of(with_graph("group dp = {0, 2}, {1}\n")),
            "g.sf:1:20: error: group 'dp': subgroup {1} has 1 rank but {0, 2} has 2 (the subgroups "
            "of a group have one size)\n"
            "  group dp = {0, 2}, {1}\n"
            "                     ^");
  EXPECT_EQ(error_of(with_graph("group dp = {}\n")),
            "g.sf:1:12: error: group 'dp': empty subgroup\n  group dp = {}\n             ^");
  EXPECT_EQ(error_of(with_graph("group dp = {0, x}\n")),
            "g.sf:1:16: error: expected a rank but found 'x'\n  group dp = {0, x}\n                 ^");
  // The old `expected 'graph'` without a hint.
  EXPECT_EQ(error_of(with_graph("group dp[0, 2]\n")),
            "g.sf:1:9: error: expected '(' or '=' after the group name but found '[' (write "
            "`group dp = {0, 2}, {1, 3}` for listed members, `group dp(2)` for blocks of 2 ranks)\n"
            "  group dp[0, 2]\n"
            "          ^");
  EXPECT_EQ(error_of(with_graph("group tp(0)\n")),
            "g.sf:1:10: error: group 'tp': block size 0 is not between 1 and the world size 4\n"
            "  group tp(0)\n"
            "           ^");
}

TEST(ExplicitGroups, AnOpOnAGroupThatLeavesRanksOutIsRefused) {
  const std::string text =
      "group half = {0, 1}\n"
      "graph g(x: f32[4]) {\n"
      "  y = symm_mem::one_shot_all_reduce(x, \"sum\", \"half\")\n"
      "  return y\n"
      "}\n";
  EXPECT_EQ(error_of(text),
            "g.sf:3:7: error: symm_mem::one_shot_all_reduce: ranks 2, 3 of the world of 4 are in "
            "no subgroup of group 'half', but every rank runs every op (list every rank in a "
            "subgroup)\n"
            "    y = symm_mem::one_shot_all_reduce(x, \"sum\", \"half\")\n"
            "        ^");
  EXPECT_EQ(error_of(text, 2), "<no error>");  // at 2 ranks it covers the world
  EXPECT_EQ(error_of(with_graph("group half = {0, 1}\n")), "<no error>");  // declared, unused
}

TEST(ExplicitGroups, BuilderValidatesTheSameRules) {
  Graph g("g", 4);
  g.add_group({"dp", 0, {{0, 2}, {1, 3}}, {}});
  EXPECT_EQ(g.group_size("dp"), 2);
  EXPECT_EQ(testing::error_of([&] { g.add_group({"a", 0, {{0, 4}}, {}}); }),
            "group 'a': rank 4 is outside the world of 4 ranks");
  EXPECT_EQ(testing::error_of([&] { g.add_group({"b", 0, {{0, 1}, {1, 2}}, {}}); }),
            "group 'b': rank 1 is in subgroup 0 and again in subgroup 1");
  EXPECT_EQ(testing::error_of([&] { g.add_group({"c", 0, {{0, 1}, {2}}, {}}); }),
            "group 'c': subgroup 1 has 1 ranks but subgroup 0 has 2 (all subgroups of a group "
            "have one size)");
  EXPECT_EQ(testing::error_of([&] { g.add_group({"d", 2, {{0, 1}}, {}}); }),
            "group 'd': both a block size and subgroups");
}

}  // namespace
}  // namespace symmflow::ir
