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

// A step's label: its op (a fused region: its body's ops) and its largest operand's size. The
// executor makes it once per step, at the step's first timed run.
std::string step_label(const passes::PlanStep& step);
// Adds one run of the step labelled `label` that took `us` microseconds (every rank and thread of
// the process).
void record_step_time(const std::string& label, double us);
// The totals since the start (or the last reset), the largest first.
std::vector<StepTime> step_profile();
void reset_step_profile();
// The `top` largest totals as a table (empty when nothing was recorded).
std::string step_profile_text(size_t top = 30);

}  // namespace symmflow::exec
