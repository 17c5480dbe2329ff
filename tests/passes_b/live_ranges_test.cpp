// The live-range layer of the memory planner on a hand-placed graph: buffers in definition order,
// aliases pointing at their base (which lives as long as they do), colours regular first and then
// symm pools in order of first definition, outputs live to the end, nothing assigned yet.
#include "symmflow/passes/live_ranges.hpp"

#include <gtest/gtest.h>

#include "support/graphs.hpp"

namespace symmflow::passes {
namespace {

TEST(LiveRanges, BuffersAliasesAndColoursByHand) {
  auto g = testing::parse(R"sf(group tp
group dp
graph g(x: f32[8]) {
  a = aten::relu(x) @ symm[dp]
  b = aten::neg(a) @ regular
  v = aten::view(b, [2, 4])
  c = aten::sin(x) @ symm[tp]
  d = aten::relu(v) @ regular
  return d, c
})sf");
  LiveRanges r = compute_live_ranges(*g);
  EXPECT_EQ(r.steps, 5);
  struct Want {
    const char* name;
    int first, last, alias_of;
    bool intermediate;
  };
  const Want want[] = {{"a", 0, 1, -1, true},
                       {"b", 1, 4, -1, true},  // through its view's last use
                       {"v", 2, 4, 1, true},
                       {"c", 3, 5, -1, false},
                       {"d", 4, 5, -1, false}};
  ASSERT_EQ(r.buffers.size(), std::size(want));
  for (size_t i = 0; i < r.buffers.size(); ++i) {
    SCOPED_TRACE(want[i].name);
    const BufferPlan& b = r.buffers[i];
    EXPECT_EQ(b.name, want[i].name);
    EXPECT_EQ(b.first_step, want[i].first);
    EXPECT_EQ(b.last_step, want[i].last);
    EXPECT_EQ(b.alias_of, want[i].alias_of);
    EXPECT_EQ(b.intermediate, want[i].intermediate);
    EXPECT_EQ(b.bytes, 32u);
    EXPECT_EQ(b.pool, -1);  // assign_buffers fills it
    EXPECT_EQ(r.buffer_of.at(g->find_value(want[i].name)), int(i));
  }
  ASSERT_EQ(r.colours.size(), 3u);
  EXPECT_EQ(r.colours[0].layout.str(), "regular");
  EXPECT_EQ(r.colours[0].buffers, (std::vector<int>{1, 4}));
  EXPECT_EQ(r.colours[1].layout.str(), "symm[dp]");
  EXPECT_EQ(r.colours[1].buffers, (std::vector<int>{0}));
  EXPECT_EQ(r.colours[2].layout.str(), "symm[tp]");
  EXPECT_EQ(r.colours[2].buffers, (std::vector<int>{3}));
}

// Note [synchronised peer writes]: a buffer a synchronising collective writes in place lives to
// the last read of the value it holds (here c's add), not to the end; Note [peer-written
// buffers]: put_signal's dst (one_sided) owns its bytes for the whole run, from step 0.
TEST(LiveRanges, InPlaceCollectiveEndsAtItsLastReadAndPutDstOwnsTheRun) {
  auto g = testing::parse(R"sf(group tp
graph g(x: f32[8]) {
  a = aten::relu(x) @ symm[tp]
  symm_mem::two_shot_all_reduce_(a, "sum", "tp")
  b = aten::neg(a) @ regular
  d = aten::sin(x) @ symm[tp]
  c = aten::add.Tensor(b, a) @ regular
  symm_mem::put_signal(b, d, 0, 0, "tp")
  e = aten::cos(c) @ regular
  return e
})sf");
  LiveRanges r = compute_live_ranges(*g);
  EXPECT_EQ(r.steps, 7);
  const BufferPlan& a = r.buffers[size_t(r.buffer_of.at(g->find_value("a")))];
  EXPECT_EQ(a.first_step, 0);
  EXPECT_EQ(a.last_step, 4);  // c = add(b, a)
  const BufferPlan& d = r.buffers[size_t(r.buffer_of.at(g->find_value("d")))];
  EXPECT_EQ(d.first_step, 0);
  EXPECT_EQ(d.last_step, 7);
}

}  // namespace
}  // namespace symmflow::passes
