// Every examples/*.sf (found at test time in SYMMFLOW_EXAMPLES_DIR, the source tree's examples)
// compiles at world sizes 1, 2 and 4, and each pool's planned peak is within 5% of its lower
// bound (the most bytes live at one step; DESIGN "Memory"). The figures are printed.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "symmflow/ir/text.hpp"
#include "symmflow/passes/pipeline.hpp"

namespace symmflow {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> example_files() {
  std::vector<fs::path> out;
  for (const fs::directory_entry& e : fs::directory_iterator(SYMMFLOW_EXAMPLES_DIR)) {
    if (e.is_regular_file() && e.path().extension() == ".sf") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Examples, PeakWithinFivePercentOfLowerBound) {
  std::vector<fs::path> files = example_files();
  ASSERT_FALSE(files.empty()) << "no .sf file in " << SYMMFLOW_EXAMPLES_DIR;
  for (const fs::path& file : files) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    // Explicit groups name their members, so those examples are written for one world size.
    std::vector<int> worlds = {1, 2, 4};
    if (file.filename() == "tp_dp.sf") worlds = {4};
    if (file.filename() == "tp_dp8.sf") worlds = {8};
    for (int world : worlds) {
      SCOPED_TRACE(fmt::format("{} at {} ranks", file.filename().string(), world));
      std::shared_ptr<const passes::Plan> plan;
      try {
        plan = passes::compile(ir::parse_graph(text.str(), {file.string(), world}));
      } catch (const std::exception& e) {
        ADD_FAILURE() << "does not compile: " << e.what();
        continue;
      }
      for (const passes::PoolPlan& p : plan->pools) {
        double ratio = p.lower_bound ? double(p.bytes) / double(p.lower_bound) : 1.0;
        fmt::print("{} ranks={} pool {}: peak {} B, lower bound {} B ({:+.1f}%), order {}\n",
                   file.filename().string(), world, p.name, p.bytes, p.lower_bound,
                   100.0 * (ratio - 1.0), p.order);
        EXPECT_GE(p.bytes, p.lower_bound) << p.name;
        EXPECT_LE(double(p.bytes), 1.05 * double(p.lower_bound)) << p.name;
      }
    }
  }
}

}  // namespace
}  // namespace symmflow
