// The collective test cases of tests/collectives/cases.hpp on the mpi transport (one process per
// rank, mpirun -np 2 and -np 4), on a reduced matrix: every op, dtypes f32 / bf16 / i64, reduce
// ops sum and max, sizes 0, 1, 7 and 1023 (strided outputs where the case asks), over a group
// whose rank order is the reverse of the world's. Every rank checks every element (cases.hpp); a
// rank whose case fails poisons the world so the others stop instead of waiting.
#include <algorithm>

#include <gtest/gtest.h>

#include "collectives/cases.hpp"
#include "support/rank_helpers.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/ops/registry.hpp"
#include "symmflow/runtime/heap.hpp"

namespace symmflow::testing {
namespace {

std::vector<Case> reduced_matrix(Op op, int world) {
  std::vector<Case> out;
  for (const Case& c : case_matrix(op, world)) {
    bool dtype = c.dtype == DType::f32 || c.dtype == DType::bf16 || c.dtype == DType::i64;
    bool rop = c.reduce_op == "sum" || c.reduce_op == "max";
    if (dtype && rop && c.numel <= 1023) out.push_back(c);
  }
  return out;
}

class MpiCollectives : public ::testing::TestWithParam<Op> {};

TEST_P(MpiCollectives, ReducedMatrix) {
  ScopedTunables quick(oversubscribed_tunables());
  Registry::global();
  Runtime& r = rt();
  std::vector<int> reversed = all_ranks();
  std::reverse(reversed.begin(), reversed.end());
  std::string name = fresh_group(std::string("coll_") + op_name(GetParam()) + "_", reversed);
  std::vector<Case> cases = reduced_matrix(GetParam(), r.world_size());
  ASSERT_FALSE(cases.empty());
  Workspace ws(r, name);
  std::exception_ptr err = run_rank([&] {
    for (const Case& c : cases) run_case(ws, c);
  });
  EXPECT_FALSE(err) << "rank " << r.rank() << ": " << message_of(err);
}

std::string param_name(const ::testing::TestParamInfo<Op>& info) {
  std::string name = op_name(info.param);
  if (name[0] == '_') name = name.substr(1);
  if (name.back() == '_') name.pop_back();
  return name;
}

INSTANTIATE_TEST_SUITE_P(Ops, MpiCollectives, ::testing::ValuesIn(kAllOps), param_name);

// Note [collective agreement] in src/runtime/agreement.cpp, across processes: rank 1 passes i32
// where the others pass f32 of the same bytes, then "max" where they pass "sum"; every rank raises
// naming the field and each rank's value, and the group then runs a correct call.
TEST(MpiAgreement, DtypesAndReduceOpsThatDifferAreNamedOnEveryRank) {
  Registry::global();
  Runtime& r = rt();
  const std::string g = fresh_group("agree_");
  auto heap = SymmetricHeap::allocate(r.group(g), 64);
  Tensor x = symmetric_tensor(heap, 0, {4}, r.rank() == 1 ? DType::i32 : DType::f32);
  std::string others = r.world_size() == 2 ? "rank 0" : "ranks 0";
  for (int p = 2; p < r.world_size(); ++p) others += ", " + std::to_string(p);
  auto error_of = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  const std::string head = "symm_mem::one_shot_all_reduce: the ranks of group '" + g +
                           "' disagree on ";
  EXPECT_EQ(error_of([&] { call("symm_mem::one_shot_all_reduce", {x, "sum", g}); }),
            head + "dtype (collective agreement; no data was exchanged):\n  dtype: f32 on " +
                others + "; i32 on rank 1");
  // Note [poisoned groups]: the group is unusable after it; the next call names the first error.
  Tensor y = symmetric_tensor(heap, 0, {4}, DType::f32);
  const std::string after = error_of([&] { call("symm_mem::one_shot_all_reduce", {y, "sum", g}); });
  EXPECT_EQ(after.rfind("symm_mem::one_shot_all_reduce: group '" + g + "' is poisoned: a "
                        "collective failed on rank " + std::to_string(r.rank()) + " at ", 0),
            0u)
      << after;
  EXPECT_NE(after.find("dtype: f32 on " + others + "; i32 on rank 1"), std::string::npos) << after;
  // A new group of the same ranks goes on: its own disagreement, then (another) a right sum.
  const std::string g2 = fresh_group("agree_");
  auto heap2 = SymmetricHeap::allocate(r.group(g2), 64);
  Tensor y2 = symmetric_tensor(heap2, 0, {4}, DType::f32);
  for (int i = 0; i < 4; ++i) y2.data<float>()[i] = float(r.rank() + 1);
  const std::string head2 = "symm_mem::one_shot_all_reduce: the ranks of group '" + g2 +
                            "' disagree on ";
  EXPECT_EQ(error_of([&] {
              call("symm_mem::one_shot_all_reduce", {y2, r.rank() == 1 ? "max" : "sum", g2});
            }),
            head2 + "reduce op (collective agreement; no data was exchanged):\n  reduce op: sum "
                    "on " + others + "; max on rank 1");
  const std::string g3 = fresh_group("agree_");
  auto heap3 = SymmetricHeap::allocate(r.group(g3), 64);
  Tensor y3 = symmetric_tensor(heap3, 0, {4}, DType::f32);
  for (int i = 0; i < 4; ++i) y3.data<float>()[i] = float(r.rank() + 1);
  Tensor z = call("symm_mem::one_shot_all_reduce", {y3, "sum", g3}).to_tensor();
  const float want = float(r.world_size() * (r.world_size() + 1) / 2);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(z.data<float>()[i], want);
}

}  // namespace
}  // namespace symmflow::testing
