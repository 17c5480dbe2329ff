// The heap packer on plain intervals, as XLA tests its heap simulator: small cases computed by
// hand (every offset asserted), the refusals' exact text, and properties over 1000 random
// interval sets checked against naive references (no two intervals live at a common step
// overlap in memory, offsets aligned, lower bound = the most bytes live at one step, lower
// bound <= size <= the sum of the footprints, the smallest order kept, events, determinism).
#include "symmflow/passes/heap_packer.hpp"

#include <algorithm>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/errors.hpp"
#include "symmflow/core/error.hpp"

namespace symmflow::passes {
namespace {

using Tried = std::vector<std::pair<std::string, size_t>>;

size_t footprint(const HeapInterval& in) {
  return (in.bytes + in.alignment - 1) / in.alignment * in.alignment;
}

std::vector<size_t> offsets_by_id(const std::vector<HeapInterval>& in, const HeapPacking& p) {
  std::vector<size_t> out;
  for (size_t i = 0; i < in.size(); ++i) out.push_back(p.offsets[i]);
  return out;
}

TEST(HeapPacker, OneIntervalNotAlwaysLive) {
  HeapPacking p = pack_heap({{7, 1, 2, 100, 64}}, 3);
  EXPECT_EQ(p.offsets, std::vector<size_t>{0});
  EXPECT_EQ(p.size, 128u);
  EXPECT_EQ(p.lower_bound, 128u);
  EXPECT_EQ(p.order, "start");
  EXPECT_EQ(p.tried, (Tried{{"start", 128}, {"size", 128}, {"end", 128}}));
  ASSERT_EQ(p.events.size(), 2u);
  EXPECT_EQ(p.events[0].kind, HeapPackEvent::Kind::alloc);
  EXPECT_EQ(p.events[0].step, 1);
  EXPECT_EQ(p.events[0].id, 7);
  EXPECT_EQ(p.events[0].bytes, 100u);  // as requested, not rounded
  EXPECT_EQ(p.events[1].kind, HeapPackEvent::Kind::free);
  EXPECT_EQ(p.events[1].step, 3);
}

TEST(HeapPacker, OneIntervalAlwaysLive) {
  HeapPacking p = pack_heap({{0, 0, 4, 1, 64}}, 4);
  EXPECT_EQ(p.offsets, std::vector<size_t>{0});
  EXPECT_EQ(p.size, 64u);
  EXPECT_EQ(p.lower_bound, 64u);
}

TEST(HeapPacker, Empty) {
  HeapPacking p = pack_heap({}, 0);
  EXPECT_TRUE(p.offsets.empty());
  EXPECT_EQ(p.size, 0u);
  EXPECT_EQ(p.lower_bound, 0u);
  EXPECT_EQ(p.order, "start");
  EXPECT_TRUE(p.events.empty());
}

TEST(HeapPacker, DisjointInTimeShareOffsetZero) {
  std::vector<HeapInterval> in = {{0, 0, 1, 64, 64}, {1, 2, 3, 256, 64}, {2, 4, 5, 128, 64}};
  HeapPacking p = pack_heap(in, 5);
  EXPECT_EQ(offsets_by_id(in, p), (std::vector<size_t>{0, 0, 0}));
  EXPECT_EQ(p.size, 256u);  // the largest
  EXPECT_EQ(p.lower_bound, 256u);
}

// Start sweep: A 0, B 128, C 192; at step 2 C's range ended (the top drops to 192), E takes 192;
// at step 3 A's [0, 128) is free and D takes its best fit, 0. "size" also reaches 256, "end" 320.
TEST(HeapPacker, StartOrderByHand) {
  std::vector<HeapInterval> in = {{0, 0, 2, 128, 64},
                                  {1, 0, 4, 64, 64},
                                  {2, 0, 1, 64, 64},
                                  {3, 3, 5, 64, 64},
                                  {4, 2, 5, 64, 64}};
  HeapPacking p = pack_heap(in, 5);
  EXPECT_EQ(offsets_by_id(in, p), (std::vector<size_t>{0, 128, 192, 0, 192}));
  EXPECT_EQ(p.size, 256u);
  EXPECT_EQ(p.lower_bound, 256u);
  EXPECT_EQ(p.order, "start");
  EXPECT_EQ(p.tried, (Tried{{"start", 256}, {"size", 256}, {"end", 320}}));
}

// The start sweep puts X at 0 and Y at 64; Z (128 B) cannot use X's freed 64 B and goes on top
// (256). Largest-first places Z at 0, X beside it in time at 0, Y above both at 128 (192).
TEST(HeapPacker, SizeOrderBeatsStartByHand) {
  std::vector<HeapInterval> in = {{0, 0, 1, 64, 64}, {1, 0, 3, 64, 64}, {2, 2, 3, 128, 64}};
  HeapPacking p = pack_heap(in, 4);
  EXPECT_EQ(offsets_by_id(in, p), (std::vector<size_t>{0, 128, 0}));
  EXPECT_EQ(p.size, 192u);
  EXPECT_EQ(p.lower_bound, 192u);
  EXPECT_EQ(p.order, "size");
  EXPECT_EQ(p.tried, (Tried{{"start", 256}, {"size", 192}, {"end", 192}}));
}

// Note [always-live buffers]: P lives over [0, horizon]; it is stacked at 0 and the rest packed
// above it (Q and R share 128 as they never meet).
TEST(HeapPacker, AlwaysLiveStackedAtTheBottom) {
  std::vector<HeapInterval> in = {{0, 0, 0, 64, 64}, {1, 0, 2, 100, 64}, {2, 1, 2, 64, 64}};
  HeapPacking p = pack_heap(in, 2);
  EXPECT_EQ(offsets_by_id(in, p), (std::vector<size_t>{128, 0, 128}));
  EXPECT_EQ(p.size, 192u);
  EXPECT_EQ(p.lower_bound, 192u);
  EXPECT_EQ(p.tried, (Tried{{"start", 192}, {"size", 192}, {"end", 192}}));
}

// A 256-aligned B after a 64 B A: the start sweep pads the top to 256 (512 in all); largest-first
// puts B at 0 and A at 256 (320).
TEST(HeapPacker, MixedAlignmentByHand) {
  std::vector<HeapInterval> in = {{0, 0, 1, 64, 64}, {1, 1, 2, 256, 256}};
  HeapPacking p = pack_heap(in, 3);
  EXPECT_EQ(offsets_by_id(in, p), (std::vector<size_t>{256, 0}));
  EXPECT_EQ(p.size, 320u);
  EXPECT_EQ(p.tried, (Tried{{"start", 512}, {"size", 320}, {"end", 320}}));
}

TEST(HeapPacker, PaddingGapIsReused) {
  // A (64) at 0, B (256-aligned) padded to 256 leaving [64, 256) free; C (128, 64-aligned) fits
  // that gap in the start sweep, so the pool stays at 512.
  std::vector<HeapInterval> in = {
      {0, 0, 3, 64, 64}, {1, 1, 3, 256, 256}, {2, 2, 3, 128, 64}};
  HeapPacking p = pack_heap(in, 4);
  EXPECT_EQ(p.tried[0], (std::pair<std::string, size_t>{"start", 512}));
  EXPECT_EQ(offsets_by_id(in, p)[2] % 64, 0u);
  EXPECT_EQ(p.size, 448u);  // "size": B 0, C 256, A 384
  EXPECT_EQ(offsets_by_id(in, p), (std::vector<size_t>{384, 0, 256}));
}

TEST(HeapPacker, ZeroSizeIntervalsTakeNoMemory) {
  std::vector<HeapInterval> in = {{0, 1, 2, 0, 64}, {1, 0, 3, 0, 64}};
  HeapPacking p = pack_heap(in, 5);
  EXPECT_EQ(offsets_by_id(in, p), (std::vector<size_t>{0, 0}));
  EXPECT_EQ(p.size, 0u);
  EXPECT_EQ(p.lower_bound, 0u);
  EXPECT_EQ(p.events.size(), 4u);  // still allocated and freed
}

TEST(HeapPacker, SizeOrderGivesUpOnManyOverlaps) {
  std::vector<HeapInterval> in;
  for (int i = 0; i < 2000; ++i) in.push_back({i, 1, 8, 64, 64});
  HeapPacking p = pack_heap(in, 10);
  EXPECT_EQ(p.tried[1], (std::pair<std::string, size_t>{"size", 0}));
  EXPECT_EQ(p.size, 2000u * 64);
  EXPECT_EQ(p.order, "start");
}

TEST(HeapPacker, RefusesBadIntervals) {
  auto message = [](std::vector<HeapInterval> in, int horizon) {
    return testing::error_of([&] { pack_heap(in, horizon); });
  };
  EXPECT_EQ(message({{3, 0, 1, 8, 48}}, 2),
            "heap packer: interval 3 has alignment 48, not a power of two");
  EXPECT_EQ(message({{4, 0, 1, 8, 0}}, 2),
            "heap packer: interval 4 has alignment 0, not a power of two");
  EXPECT_EQ(message({{5, 2, 1, 8, 64}}, 2),
            "heap packer: interval 5 lives over steps [2, 1], outside [0, 2] or backwards");
  EXPECT_EQ(message({{6, 0, 3, 8, 64}}, 2),
            "heap packer: interval 6 lives over steps [0, 3], outside [0, 2] or backwards");
  EXPECT_EQ(message({{7, -1, 1, 8, 64}}, 2),
            "heap packer: interval 7 lives over steps [-1, 1], outside [0, 2] or backwards");
  try {
    pack_heap({{8, 0, 1, 8, 3}}, 2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
  }
}

std::vector<HeapInterval> random_intervals(std::mt19937& rng, bool mixed_alignment, int horizon) {
  static const size_t kAlignments[] = {1, 8, 64, 256, 4096};
  std::uniform_int_distribution<int> count(0, 40), step(0, horizon), pick(0, 4), coin(0, 9);
  std::uniform_int_distribution<size_t> bytes(1, 5000);
  std::vector<HeapInterval> out;
  int n = count(rng);
  for (int i = 0; i < n; ++i) {
    int a = step(rng), b = step(rng);
    HeapInterval in{i, std::min(a, b), std::max(a, b), coin(rng) == 0 ? 0 : bytes(rng),
                    mixed_alignment ? kAlignments[pick(rng)] : 64};
    if (coin(rng) == 0) in = {i, 0, horizon, in.bytes, in.alignment};  // always live
    out.push_back(in);
  }
  return out;
}

void check_packing(const std::vector<HeapInterval>& in, int horizon, const HeapPacking& p,
                   bool mixed_alignment) {
  ASSERT_EQ(p.offsets.size(), in.size());
  size_t sum = 0, sum_padded = 0;
  std::vector<size_t> live(size_t(horizon) + 1, 0);
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(p.offsets[i] % in[i].alignment, 0u) << "interval " << i;
    EXPECT_LE(p.offsets[i] + footprint(in[i]), p.size) << "interval " << i;
    sum += footprint(in[i]);
    sum_padded += footprint(in[i]) + in[i].alignment - 1;
    for (int s = in[i].start; s <= in[i].end; ++s) live[size_t(s)] += footprint(in[i]);
    for (size_t j = 0; j < i; ++j) {
      bool meet = in[i].start <= in[j].end && in[j].start <= in[i].end;
      bool overlap = p.offsets[i] < p.offsets[j] + footprint(in[j]) &&
                     p.offsets[j] < p.offsets[i] + footprint(in[i]);
      EXPECT_FALSE(meet && overlap) << "intervals " << j << " and " << i;
    }
  }
  EXPECT_EQ(p.lower_bound, *std::max_element(live.begin(), live.end()));
  EXPECT_GE(p.size, p.lower_bound);
  EXPECT_LE(p.size, mixed_alignment ? sum_padded : sum);
  // The smallest order kept (the first of equals); orders that gave up record 0.
  ASSERT_EQ(p.tried.size(), 3u);
  size_t best = SIZE_MAX;
  std::string best_order;
  for (const auto& [order, size] : p.tried) {
    if (size != 0 && size < best) {
      best = size;
      best_order = order;
    }
  }
  if (p.size > 0) {
    EXPECT_EQ(p.size, best);
    EXPECT_EQ(p.order, best_order);
  }
  // Events: one alloc at start and one free at end + 1 per interval, in (step, free first, id).
  ASSERT_EQ(p.events.size(), 2 * in.size());
  for (size_t e = 1; e < p.events.size(); ++e) {
    const HeapPackEvent &a = p.events[e - 1], &b = p.events[e];
    bool ordered = a.step < b.step || (a.step == b.step && a.kind == HeapPackEvent::Kind::free &&
                                       b.kind == HeapPackEvent::Kind::alloc) ||
                   (a.step == b.step && a.kind == b.kind && a.id <= b.id);
    EXPECT_TRUE(ordered) << "event " << e;
  }
  for (const HeapPackEvent& e : p.events) {
    const HeapInterval& i = in[size_t(e.id)];  // ids are the indices here
    EXPECT_EQ(e.step, e.kind == HeapPackEvent::Kind::alloc ? i.start : i.end + 1);
    EXPECT_EQ(e.offset, p.offsets[size_t(e.id)]);
    EXPECT_EQ(e.bytes, i.bytes);
  }
}

TEST(HeapPacker, PropertiesOnRandomIntervals) {
  std::mt19937 rng(20261125);
  std::uniform_int_distribution<int> horizons(0, 30);
  for (int round = 0; round < 1000; ++round) {
    bool mixed = round % 2 == 1;
    int horizon = horizons(rng);
    std::vector<HeapInterval> in = random_intervals(rng, mixed, horizon);
    SCOPED_TRACE(fmt::format("round {}: {} intervals over [0, {}], {} alignment", round,
                             in.size(), horizon, mixed ? "mixed" : "64-byte"));
    HeapPacking p = pack_heap(in, horizon);
    check_packing(in, horizon, p, mixed);
    HeapPacking again = pack_heap(in, horizon);  // deterministic
    EXPECT_EQ(again.offsets, p.offsets);
    EXPECT_EQ(again.size, p.size);
    EXPECT_EQ(again.tried, p.tried);
    if (HasFailure()) return;
  }
}

// Zero-byte intervals change nothing for the others (they are skipped by every order).
TEST(HeapPacker, ZeroSizeIntervalsDoNotMoveOthers) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<HeapInterval> in = random_intervals(rng, false, 20);
    std::vector<HeapInterval> nonzero;
    for (const HeapInterval& i : in) {
      if (i.bytes > 0) nonzero.push_back(i);
    }
    HeapPacking all = pack_heap(in, 20), some = pack_heap(nonzero, 20);
    EXPECT_EQ(all.size, some.size) << "round " << round;
    for (size_t i = 0, k = 0; i < in.size(); ++i) {
      if (in[i].bytes > 0) {
        EXPECT_EQ(all.offsets[i], some.offsets[k++]) << "round " << round;
      }
    }
  }
}

}  // namespace
}  // namespace symmflow::passes
