// The test matrix of the cpu collectives on threads: every op x world sizes 1, 2, 3, 4, 8 x every
// dtype x every reduce op where it applies x sizes 0, 1, 7, 1023, 4099 and 1 MiB (fewer
// combinations), each (op, world size) batched into one run_threads call over a group whose rank
// order is the reverse of the global order (under ASan fewer cases at 8 ranks: Note [fewer cases
// under the sanitizers]). Case bodies live in cases.hpp (reusable under MPI).
#include <gtest/gtest.h>

#include <utility>

#include "collectives/cases.hpp"
#include "symmflow/ops/registry.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::testing {
namespace {

using Param = std::tuple<Op, int>;

class Matrix : public ::testing::TestWithParam<Param> {};

TEST_P(Matrix, EveryCase) {
  // Plain variables, not a structured binding: clang 14 (the asan tree's) cannot capture one.
  const auto op = std::get<0>(GetParam());
  const int world = std::get<1>(GetParam());
  ScopedTunables quick(oversubscribed_tunables());
  Registry::global();  // register ops on this thread before the ranks look them up
  std::vector<Case> cases = case_matrix(op, world);
#if defined(SYMMFLOW_ASAN)
  // Note [fewer cases under the sanitizers] in cases.hpp
  if (world == 8) cases = fewer_cases(std::move(cases));
#endif
  ASSERT_FALSE(cases.empty());
  run_threads(world, [&](Runtime& rt) {
    std::vector<int> reversed;
    for (int r = world - 1; r >= 0; --r) reversed.push_back(r);
    rt.new_group("g", reversed);
    Workspace ws(rt, "g");
    for (const Case& c : cases) run_case(ws, c);
  }, ThreadsOptions{60});
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string name = op_name(std::get<0>(info.param));
  if (name[0] == '_') name = name.substr(1);
  if (name.back() == '_') name.pop_back();
  return name + "_W" + std::to_string(std::get<1>(info.param));
}

#if defined(SYMMFLOW_TSAN)
constexpr int kWorlds[] = {1, 2, 4};
#else
constexpr int kWorlds[] = {1, 2, 3, 4, 8};
#endif

INSTANTIATE_TEST_SUITE_P(Collectives, Matrix,
                         ::testing::Combine(::testing::ValuesIn(kAllOps),
                                            ::testing::ValuesIn(kWorlds)),
                         param_name);

}  // namespace
}  // namespace symmflow::testing
