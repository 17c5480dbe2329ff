// symm_mem::reduce_out (Note [reduce to root]) on threads, world sizes 1, 2, 3, 4 and 8 (a group
// in reverse rank order), every root, dtypes f32, bf16, f16, f64, i32, i64, every reduce op, sizes
// 0, 1, 7, 33 and 1000 at unaligned offsets, contiguous and strided outputs:
//   - the root's out element for element against a naive reference in rank order, and bit for bit
//     against one_shot_all_reduce of the same inputs;
//   - every other rank's out untouched (sentinel values), the input unchanged, guard bytes intact;
//   - compiled: a program calling it runs through the compiler and executor, with explain naming
//     the op's declared exchange;
//   - the exact error text for a bad root, a bad out, an input outside symmetric memory.
#include <functional>
#include <mutex>

#include <gtest/gtest.h>

#include "collectives/workspace.hpp"
#include "support/errors.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/ops/registry.hpp"
#include "symmflow/symmflow.hpp"

namespace symmflow::testing {
namespace {

constexpr const char* kOp = "symm_mem::reduce_out";

void run_case(Workspace& ws, DType d, int64_t n, const std::string& reduce_op, int root,
              bool strided, uint64_t seed) {
  Group& g = ws.group();
  const int w = g.size(), me = g.rank();
  const std::string where = fmt::format("{} {} n={} {} root {} rank {} of {}{}", kOp,
                                        dtype_name(d), n, reduce_op, root, me, w,
                                        strided ? " strided" : "");
  ws.begin(size_t(n) * dtype_size(d), 1, seed);
  Tensor input = ws.carve({n}, d);
  fill(input, [&](int64_t i) { return input_value(seed, me, i); });
  g.barrier(kTestChannel, "test");
  LocalOut out = LocalOut::make({n}, d, strided);
  Tensor sentinel = Tensor::empty({n}, d);
  fill(sentinel, [](int64_t) { return 55.0; });
  call("aten::copy_", {out.t, sentinel});
  call(kOp, {input, int64_t(root), reduce_op, ws.name(), out.t});
  // Collective: every rank calls it.
  Tensor all = call("symm_mem::one_shot_all_reduce", {input, reduce_op, ws.name()}).to_tensor();
  if (me == root) {
    expect_values(out.t, [&](int64_t i) {
      return reduce_ref(reduce_op, d, w, [&](int p) { return input_value(seed, p, i); });
    }, where + " vs the reference");
    expect_values(out.t, [&](int64_t i) { return load_double(all.view(), i); },
                  where + " vs one_shot_all_reduce");
  } else {
    expect_values(out.t, [](int64_t) { return 55.0; }, where + " (not the root: untouched)");
  }
  out.check_gaps(where);
  expect_values(input, [&](int64_t i) { return input_value(seed, me, i); }, where + " input");
  ws.check_guards(where);
}

class ReduceToRoot : public ::testing::TestWithParam<int> {};

TEST_P(ReduceToRoot, RootGetsTheReductionOthersAreUntouched) {
  const int world = GetParam();
  ScopedTunables quick(oversubscribed_tunables());
  Registry::global();
  run_threads(world, [&](Runtime& rt) {
    std::vector<int> reversed;
    for (int r = world - 1; r >= 0; --r) reversed.push_back(r);
    rt.new_group("g", reversed);
    Workspace ws(rt, "g");
    uint64_t seed = uint64_t(world) * 1000;
    for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64}) {
      for (const char* reduce_op : {"sum", "avg", "max", "min"}) {
        for (int64_t n : {0, 1, 7, 33, 1000}) {
          const int root = int(seed % uint64_t(world));
          run_case(ws, d, n, reduce_op, root, n % 2 == 1, ++seed);
        }
      }
    }
    for (int root = 0; root < world; ++root) run_case(ws, DType::f32, 65, "sum", root, false, ++seed);
  }, ThreadsOptions{60});
}

INSTANTIATE_TEST_SUITE_P(Collectives, ReduceToRoot, ::testing::Values(1, 2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "W" + std::to_string(p.param);
                         });

// Nothing in the compiler or executor names the op: a program calling it compiles, places its
// input in symmetric memory, runs on every rank, and explain prints the declared exchange.
TEST(ReduceToRootCompiled, RunsThroughTheCompilerAndExplainNamesItsExchange) {
  const std::string program = R"sf(graph reduce_root(x: f32[3, 5]) {
  y = aten::mul.Tensor(x, x)
  out = aten::empty.memory_format([3, 5], dtype=f32)
  symm_mem::reduce_out(y, 1, "sum", "world", out)
  return out
}
)sf";
  for (int ranks : {2, 3}) {
    api::CompiledProgram c = api::compile(api::Program::parse(program, {"reduce_root.sf", ranks}));
    const api::ExplainData& plan = c.explain();
    ASSERT_EQ(plan.collectives.size(), 1u);
    EXPECT_EQ(plan.collectives[0].op, "symm_mem::reduce_out");
    EXPECT_EQ(plan.collectives[0].cpu, "push-to-root");
    EXPECT_EQ(plan.collectives[0].why.rfind("every rank's input reaches the root", 0), 0u);
    std::mutex m;
    std::vector<std::string> failures;
    api::run_threads(ranks, [&](api::Rank& rank) {
      api::Session session(c, rank);
      Tensor x = Tensor::empty({3, 5}, DType::f32);
      auto value = [](int r, int64_t i) { return double(r + 1) * double(i % 4 - 1); };
      fill(x, [&](int64_t i) { return value(rank.rank(), i); });
      for (int iter = 0; iter < 2; ++iter) {
        std::vector<Tensor> got = session.run({x});
        if (rank.rank() != 1) continue;
        try {
          expect_values(got.at(0), [&](int64_t i) {
            double sum = 0;
            for (int r = 0; r < ranks; ++r) sum += value(r, i) * value(r, i);
            return sum;
          }, fmt::format("compiled reduce_out at {} ranks, run {}", ranks, iter));
        } catch (const std::exception& e) {
          std::lock_guard lock(m);
          failures.push_back(e.what());
        }
      }
    });
    EXPECT_TRUE(failures.empty()) << failures.front();
  }
}


TEST(ReduceToRootErrors, RootOutAndInputAreChecked) {
  Registry::global();
  run_threads(2, [](Runtime&) {
    Tensor in = empty_symmetric({4, 8}, DType::f32, "world");
    Tensor out = Tensor::empty({4, 8}, DType::f32);
    EXPECT_EQ(usage_error_of([&] { call(kOp, {in, int64_t(2), "sum", "world", out}); }),
              "symm_mem::reduce_out: root 2 out of range for group 'world' of size 2");
    EXPECT_EQ(usage_error_of([&] { call(kOp, {in, int64_t(-1), "sum", "world", out}); }),
              "symm_mem::reduce_out: root -1 out of range for group 'world' of size 2");
    EXPECT_EQ(usage_error_of([&] { call(kOp, {in, int64_t(0), "sum", "world", Tensor::empty({4, 7}, DType::f32)}); }),
              "symm_mem::reduce_out: argument 'out' is f32[4, 7] but must be f32[4, 8] (like "
              "'input')");
    EXPECT_EQ(usage_error_of([&] { call(kOp, {in, int64_t(0), "prod", "world", out}); }).rfind(
                  "symm_mem::reduce_out: unknown reduce_op 'prod'", 0),
              0u);
    const std::string local =
        usage_error_of([&] { call(kOp, {Tensor::empty({4, 8}, DType::f32), int64_t(0), "sum", "world", out}); });
    EXPECT_EQ(local.rfind("symm_mem::reduce_out: argument 'input'", 0), 0u) << local;
  });
}

}  // namespace
}  // namespace symmflow::testing
