// The step profile (Note [step profile]): where a CPU plan's time goes, per op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "symmflow/passes/plan.hpp"

namespace symmflow::exec {

struct StepTime {
  std::string label;  // "aten::mm.out 2 MiB", "fused(aten::mul.Tensor, aten::add.Tensor) 2 MiB"
  double total_us = 0;
  int64_t calls = 0;
};

// Adds one run of `step` that took `us` microseconds (every rank and thread of the process).
void record_step_time(const passes::PlanStep& step, double us);
// The totals since the start (or the last reset), the largest first.
std::vector<StepTime> step_profile();
void reset_step_profile();
// The `top` largest totals as a table (empty when nothing was recorded).
std::string step_profile_text(size_t top = 30);

}  // namespace symmflow::exec
