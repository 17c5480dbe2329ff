// Where each step of a plan runs on a device: its stream, the step of the other stream it waits
// for, whether it may start before the step ahead of it ends, and which of its operands nothing
// writes (Note [streams of a plan] in src/exec/streams.cpp). A pure function of the steps' memory
// accesses, so the CPU tests check it without a GPU.
#pragma once

#include <vector>

namespace symmflow::exec {

// Bytes [lo, hi) of device memory; unknown: not known before the run (overlaps everything).
struct ByteRange {
  const char* lo = nullptr;
  const char* hi = nullptr;
  bool unknown = false;
  bool overlaps(const ByteRange& o) const {
    return unknown || o.unknown || (lo < o.hi && o.lo < hi);
  }
};

// What a step touches, as the planner sees it.
struct StepAccess {
  bool runs = true;           // false: never enqueued with the steps (an input copied in before)
  bool communicates = false;  // it exchanges data with other ranks (its group has two or more)
  std::vector<ByteRange> reads, writes;
};

struct StepStream {
  int stream = 0;         // 0: compute, 1: communication
  int wait_for = -1;      // a step of the other stream whose completion this step waits for
  bool recorded = false;  // some later step waits for this one
  bool early = false;     // may start while the step ahead of it on its stream ends
  bool after_communication = false;  // early, behind a step that communicates (memory is idle)
  std::vector<ByteRange> stable;  // what it reads that no step of the plan writes
};

// early_launch: whether steps may start early at all (tunables().cuda_early_launch).
std::vector<StepStream> plan_streams(const std::vector<StepAccess>& steps, bool early_launch);

}  // namespace symmflow::exec
