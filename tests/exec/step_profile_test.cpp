// Note [step profile]: with the tunable on, every CPU step run is timed under its op's label (a
// fused region by its body's ops) and the bytes of its largest operand, calls counted per run;
// with it off nothing is recorded; the text table lists each row; a reset forgets them.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "support/graphs.hpp"
#include "support/tensors.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/step_profile.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow {
namespace {

constexpr const char* kGraph = R"sf(graph g(x: f32[32, 32]) {
  b = fused(x) {
    a = aten::exp(x)
    n = aten::neg(a)
    return n
  }
  c = aten::mm(b, x)
  d = aten::exp(c)
  return d
})sf";

TEST(StepProfile, TimesEveryStepPerOpOnlyWhenOn) {
  auto plan = testing::plan_text(kGraph);
  exec::Executable exe(plan);
  Tensor x = testing::make_input({32, 32}, DType::f32, 0, 3);
  const Tunables saved = tunables();
  exec::reset_step_profile();
  exe.run({x});
  EXPECT_TRUE(exec::step_profile().empty()) << "off: nothing recorded";
  EXPECT_EQ(exec::step_profile_text(), "");

  Tunables on = saved;
  on.step_profile = true;
  set_tunables(on);
  for (int i = 0; i < 3; ++i) exe.run({x});
  set_tunables(saved);
  exe.run({x});  // off again: not counted
  std::vector<exec::StepTime> rows = exec::step_profile();
  ASSERT_FALSE(rows.empty());
  std::set<std::string> labels;
  for (const exec::StepTime& r : rows) {
    EXPECT_EQ(r.calls, 3) << r.label;
    EXPECT_GE(r.total_us, 0) << r.label;
    labels.insert(r.label);
  }
  const std::string text = exec::step_profile_text();
  EXPECT_EQ(labels, (std::set<std::string>{"fused(aten::exp, aten::neg) 4 KiB", "aten::mm 4 KiB",
                                           "aten::exp 4 KiB"}))
      << text;
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_GE(rows[i - 1].total_us, rows[i].total_us);
  EXPECT_NE(text.find("symmflow step profile"), std::string::npos) << text;
  EXPECT_NE(text.find("aten::mm 4 KiB"), std::string::npos) << text;
  exec::reset_step_profile();
  EXPECT_TRUE(exec::step_profile().empty());
}

}  // namespace
}  // namespace symmflow
