// plan_streams (Note [streams of a plan], Note [early launch]) on made-up byte ranges: which
// stream each step takes, the waits between streams, which steps start early and what they may
// read before waiting. The GPU tests run the plans; these pin the rules without one.
#include <gtest/gtest.h>

#include "symmflow/exec/streams.hpp"

namespace symmflow::exec {
namespace {

// Disjoint ranges of one arena, one per name.
struct Arena {
  char bytes[64 * 256];
  int used = 0;
  ByteRange next() {
    const char* lo = bytes + 256 * used++;
    return {lo, lo + 256, false};
  }
};

StepAccess compute(std::vector<ByteRange> reads, std::vector<ByteRange> writes) {
  return {true, false, std::move(reads), std::move(writes)};
}
StepAccess collective(std::vector<ByteRange> reads, std::vector<ByteRange> writes) {
  return {true, true, std::move(reads), std::move(writes)};
}

bool same(const ByteRange& a, const ByteRange& b) { return a.lo == b.lo && a.hi == b.hi; }

TEST(PlanStreams, AnAllReduceChainStaysOnTheComputeStreamAndStartsEarly) {
  Arena m;
  const ByteRange x = m.next(), h = m.next(), r = m.next(), w0 = m.next(), w1 = m.next();
  const ByteRange h1 = m.next(), r1 = m.next();
  auto p = plan_streams({compute({x, w0}, {h}), collective({h}, {r}), compute({r, w1}, {h1}),
                         collective({h1}, {r1})},
                        true);
  ASSERT_EQ(p.size(), 4u);
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(p[s].stream, 0) << s;
    EXPECT_EQ(p[s].wait_for, -1) << s;
    EXPECT_FALSE(p[s].recorded) << s;
    EXPECT_EQ(p[s].early, s > 0) << s;  // the first has no step ahead of it
    // Only the mm behind an all-reduce may load its weight before waiting.
    EXPECT_EQ(p[s].after_communication, s == 2) << s;
  }
  ASSERT_EQ(p[0].stable.size(), 2u);  // x and w0: nothing writes them
  EXPECT_TRUE(same(p[0].stable[0], x) && same(p[0].stable[1], w0));
  EXPECT_TRUE(p[1].stable.empty());  // h is written by the mm
  ASSERT_EQ(p[2].stable.size(), 1u);
  EXPECT_TRUE(same(p[2].stable[0], w1));
}

TEST(PlanStreams, ACollectiveWithComputeAfterItGoesToTheCommunicationStream) {
  Arena m;
  const ByteRange h = m.next(), r = m.next(), y = m.next(), z = m.next(), o = m.next();
  auto p = plan_streams(
      {compute({}, {h}), collective({h}, {r}), compute({y}, {z}), compute({r, z}, {o})}, true);
  EXPECT_EQ(p[1].stream, 1);
  EXPECT_EQ(p[1].wait_for, 0);  // the producer of h
  EXPECT_TRUE(p[0].recorded);
  EXPECT_FALSE(p[1].early);  // it waits for an event
  EXPECT_EQ(p[2].stream, 0);
  EXPECT_EQ(p[2].wait_for, -1);  // runs beside the collective
  EXPECT_TRUE(p[2].early);
  EXPECT_EQ(p[3].wait_for, 1);
  EXPECT_TRUE(p[1].recorded);
  EXPECT_FALSE(p[3].early);
}

TEST(PlanStreams, ACollectiveWithComputeBeforeItGoesToTheCommunicationStream) {
  Arena m;
  const ByteRange h = m.next(), r = m.next(), y = m.next(), z = m.next(), o = m.next();
  // The step just before the collective does not produce its input: they may overlap.
  auto p = plan_streams(
      {compute({}, {h}), compute({y}, {z}), collective({h}, {r}), compute({r, z}, {o})}, true);
  EXPECT_EQ(p[2].stream, 1);
  EXPECT_EQ(p[2].wait_for, 0);
  EXPECT_EQ(p[3].wait_for, 2);
}

TEST(PlanStreams, CollectivesOnTwoStreamsNeverOverlap) {
  Arena m;
  const ByteRange h = m.next(), r1 = m.next(), y = m.next(), z = m.next(), r2 = m.next();
  const ByteRange o = m.next();
  auto p = plan_streams({compute({}, {h}), collective({h}, {r1}), compute({y}, {z}),
                         collective({z}, {r2}), compute({r1, r2}, {o})},
                        true);
  EXPECT_EQ(p[1].stream, 1);  // the compute of z runs beside it
  EXPECT_EQ(p[3].stream, 0);  // nothing runs beside it
  // They share no memory, but both communicate: the second waits for the first.
  EXPECT_EQ(p[3].wait_for, 1);
  EXPECT_FALSE(p[3].early);
  EXPECT_EQ(p[4].wait_for, -1);  // implied by step 3's wait
}

TEST(PlanStreams, AFirstOrLastCollectiveAndTwoInARow) {
  Arena m;
  const ByteRange a = m.next(), b = m.next(), c = m.next(), d = m.next();
  auto p = plan_streams({collective({a}, {b}), collective({b}, {c}), compute({c}, {d})}, true);
  EXPECT_EQ(p[0].stream, 0);
  EXPECT_EQ(p[1].stream, 0);
  auto q = plan_streams({compute({a}, {b}), collective({b}, {c})}, true);
  EXPECT_EQ(q[1].stream, 0);
  EXPECT_TRUE(q[1].early);
}

TEST(PlanStreams, UnknownMemoryConflictsWithEverythingAndIsNeverStable) {
  Arena m;
  const ByteRange h = m.next(), r = m.next(), y = m.next(), z = m.next();
  const ByteRange unknown{nullptr, nullptr, true};
  auto p = plan_streams(
      {compute({}, {h}), collective({h}, {r}), compute({unknown, y}, {z})}, true);
  EXPECT_EQ(p[1].stream, 0);  // the next step may read what it writes
  ASSERT_EQ(p[2].stable.size(), 1u);
  EXPECT_TRUE(same(p[2].stable[0], y));
  auto q = plan_streams({compute({y}, {unknown}), compute({y}, {z})}, true);
  EXPECT_TRUE(q[1].stable.empty());  // an unknown write may be y
}

TEST(PlanStreams, StepsThatDoNotRunAreLeftOut) {
  Arena m;
  const ByteRange in = m.next(), staged = m.next(), h = m.next(), r = m.next();
  // The copy-in of an input runs before the steps: its buffer is stable, and the first step that
  // runs has nothing ahead of it.
  auto p = plan_streams(
      {StepAccess{false, false, {in}, {staged}}, compute({staged}, {h}), collective({h}, {r})},
      true);
  EXPECT_FALSE(p[1].early);
  ASSERT_EQ(p[1].stable.size(), 1u);
  EXPECT_TRUE(same(p[1].stable[0], staged));
  EXPECT_TRUE(p[2].early);
  EXPECT_FALSE(p[2].after_communication);
  EXPECT_TRUE(p[0].stable.empty());
}

TEST(PlanStreams, EarlyLaunchOff) {
  Arena m;
  const ByteRange x = m.next(), h = m.next(), r = m.next();
  auto p = plan_streams({compute({x}, {h}), collective({h}, {r}), compute({r}, {x})}, false);
  for (const StepStream& s : p) EXPECT_FALSE(s.early || s.after_communication);
  EXPECT_TRUE(p[0].stable.empty());  // the last step writes x
}

TEST(PlanStreams, NoSteps) { EXPECT_TRUE(plan_streams({}, true).empty()); }

}  // namespace
}  // namespace symmflow::exec
