// The step profile: per-op totals of the CPU executor's steps (step_profile.hpp).
//
// Note [step profile]: with the tunable step_profile (SYMMFLOW_STEP_PROFILE=1) a CPU plan times
// each step it runs and adds the time to a process-wide total under the step's label: its op (a
// fused region: the ops of its body), and the bytes of its largest operand, so the same op at two
// sizes reads as two rows. The table prints to stderr when the process exits, and
// step_profile() / symmflow.step_profile() return it. It is how the training step's slow spots
// of issue 40 were found (a per-element memcpy in a fused region's gather, an index_put walking
// every element, a scalar exp): perf names the kernel, not the step of the plan that called it.
// GPU plans enqueue their steps, so they time nothing here (torch.profiler sees their kernels).
// The cost when off is one test per run; when on, two clock reads and a locked map update a step
// (each step's label is made once: Executable::Step::profile_label).
#include "symmflow/exec/step_profile.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "symmflow/runtime/tunables.hpp"

namespace symmflow::exec {
namespace {

struct Totals {
  std::mutex mutex;
  std::map<std::string, StepTime> by_label;
  ~Totals() {  // at exit: the table, when anything was timed
    if (by_label.empty()) return;
    std::string text = step_profile_text();
    std::fprintf(stderr, "%s", text.c_str());
  }
};

Totals& totals() {
  static Totals t;
  return t;
}

std::string size_text(int64_t bytes) {
  if (bytes >= (int64_t(1) << 20)) return fmt::format("{:.3g} MiB", double(bytes) / (1 << 20));
  if (bytes >= 1024) return fmt::format("{:.3g} KiB", double(bytes) / 1024);
  return fmt::format("{} B", bytes);
}

}  // namespace

std::string step_label(const passes::PlanStep& step) {
  std::string op;
  switch (step.kind) {
    case passes::StepKind::copy: op = "copy"; break;
    case passes::StepKind::fused: {
      op = "fused(";
      for (const ir::Node* n : step.body->nodes()) {
        if (op.size() > 6) op += ", ";
        op += n->op()->name();
      }
      op += ")";
      break;
    }
    case passes::StepKind::call:
    case passes::StepKind::functional: op = step.op.called()->name(); break;
  }
  return fmt::format("{} {}", op, size_text(step.bytes));
}

void record_step_time(const std::string& label, double us) {
  Totals& t = totals();
  std::lock_guard lock(t.mutex);
  StepTime& e = t.by_label[label];
  if (e.label.empty()) e.label = label;
  e.total_us += us;
  ++e.calls;
}

std::vector<StepTime> step_profile() {
  Totals& t = totals();
  std::vector<StepTime> rows;
  {
    std::lock_guard lock(t.mutex);
    for (const auto& [label, row] : t.by_label) rows.push_back(row);
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const StepTime& a, const StepTime& b) { return a.total_us > b.total_us; });
  return rows;
}

void reset_step_profile() {
  Totals& t = totals();
  std::lock_guard lock(t.mutex);
  t.by_label.clear();
}

std::string step_profile_text(size_t top) {
  std::vector<StepTime> rows = step_profile();
  if (rows.empty()) return "";
  double all = 0;
  for (const StepTime& r : rows) all += r.total_us;
  std::string out = fmt::format(
      "symmflow step profile (SYMMFLOW_STEP_PROFILE): {:.1f} ms in {} kinds of step, the largest "
      "first\n{:>11} {:>6} {:>8} {:>10}  step\n",
      all / 1e3, rows.size(), "total ms", "share", "calls", "us a call");
  for (size_t i = 0; i < rows.size() && i < top; ++i) {
    const StepTime& r = rows[i];
    out += fmt::format("{:11.2f} {:5.1f}% {:8} {:10.1f}  {}\n", r.total_us / 1e3,
                       100.0 * r.total_us / all, r.calls, r.total_us / double(r.calls), r.label);
  }
  return out;
}

}  // namespace symmflow::exec
