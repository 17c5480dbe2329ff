// main() of the MPI test binaries: this process becomes a rank (init_mpi) before GoogleTest runs.
// Rank 0 prints GoogleTest's brief output; other ranks print only their failures, prefixed with
// "[rank N]". At the end the ranks agree on the result (a bounded exchange), so that rank 0's exit
// code and summary cover every rank.
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "symmflow/core/error.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  symmflow::Runtime& rt = symmflow::init_mpi(&argc, &argv);
  GTEST_FLAG_SET(brief, true);  // before InitGoogleTest, which picks the printer
  ::testing::InitGoogleTest(&argc, argv);
  if (rt.rank() != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rt.rank()));
  }
  int rc = RUN_ALL_TESTS();
  std::vector<int> world(static_cast<size_t>(rt.world_size()));
  for (int r = 0; r < rt.world_size(); ++r) world[size_t(r)] = r;
  try {
    std::vector<std::string> all =
        rt.bootstrap().allgather(world, "test-result", rc ? "1" : "0", "test_main");
    std::string failed;
    for (int r = 0; r < rt.world_size(); ++r)
      if (all[size_t(r)] != "0") failed += " " + std::to_string(r);
    if (!failed.empty()) {
      if (rt.rank() == 0) std::fprintf(stderr, "tests failed on ranks:%s\n", failed.c_str());
      rc = 1;
    }
  } catch (const symmflow::Error&) {
    // A test poisoned the world on purpose (or a rank is gone): report this rank's own result.
  }
  return rc;
}
