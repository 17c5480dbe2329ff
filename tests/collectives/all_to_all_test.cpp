// symm_mem::all_to_all and all_to_all_out (Note [equal all-to-all]) on threads, world sizes 1, 2,
// 3 and 4 (also a group in reverse rank order), dtypes f32, bf16, i64 and f16, blocks of 0, 1 and
// 7 rows, rows of shape [] (1-d input), [5] and [2, 3], at unaligned offsets, contiguous and
// strided outputs:
//   - every element of out against a naive reference (block p of rank r's out = block r of rank
//     p's input), the input unchanged, guard bytes intact;
//   - compiled: a program calling it runs through the compiler and executor (its input produced
//     in symmetric memory), with explain naming the op's declared exchange;
//   - the exact error text for dim 0 not divisible by the group size, a bad out, an input outside
//     symmetric memory, and ranks that disagree on the dtype or the shape.
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

void run_case(Workspace& ws, DType d, int64_t block_rows, const Shape& row, bool functional,
              bool strided, uint64_t seed) {
  Group& g = ws.group();
  const int w = g.size(), me = g.rank();
  Shape shape{block_rows * w};
  shape.insert(shape.end(), row.begin(), row.end());
  const int64_t n = numel(shape);
  const int64_t block = n / w;  // elements of one block
  const std::string op = functional ? "symm_mem::all_to_all" : "symm_mem::all_to_all_out";
  const std::string where = fmt::format("{} {} {} rank {} of {}{}", op, dtype_name(d),
                                        shape_str(shape), me, w, strided ? " strided" : "");
  ws.begin(size_t(n) * dtype_size(d), 1, seed);
  Tensor input = ws.carve(shape, d);
  fill(input, [&](int64_t i) { return input_value(seed, me, i); });
  g.barrier(kTestChannel, "test");
  Tensor result;
  LocalOut out;
  if (functional) {
    result = call(op, {input, ws.name()}).to_tensor();
  } else {
    out = LocalOut::make(shape, d, strided);
    call(op, {input, ws.name(), out.t});
    result = out.t;
  }
  if (result.shape() != shape || result.dtype() != d)
    fail(fmt::format("{}: result is {}", where, result.str()));
  // Naive reference: element i of out lies in block p = i / block at position i % block, and
  // comes from rank p's input block `me`.
  expect_values(result, [&](int64_t i) {
    const int64_t p = i / block, k = i % block;
    return input_value(seed, int(p), int64_t(me) * block + k);
  }, where);
  if (!functional) out.check_gaps(where);
  expect_values(input, [&](int64_t i) { return input_value(seed, me, i); }, where + " input");
  ws.check_guards(where);
  g.barrier(kTestChannel, "test");  // peers finished reading this case's input
}

class AllToAll : public ::testing::TestWithParam<int> {};

TEST_P(AllToAll, EveryBlockReachesItsRankAtEveryDtypeAndShape) {
  const int world = GetParam();
  ScopedTunables quick(oversubscribed_tunables());
  Registry::global();
  run_threads(world, [&](Runtime& rt) {
    std::vector<int> reversed;
    for (int r = world - 1; r >= 0; --r) reversed.push_back(r);
    rt.new_group("rev", reversed);
    uint64_t seed = uint64_t(world) * 1000;
    for (const char* group : {"world", "rev"}) {
      Workspace ws(rt, group);
      for (DType d : {DType::f32, DType::bf16, DType::i64, DType::f16}) {
        for (int64_t rows : {0, 1, 7}) {
          for (const Shape& row : {Shape{}, Shape{5}, Shape{2, 3}}) {
            ++seed;
            run_case(ws, d, rows, row, true, false, seed);
            run_case(ws, d, rows, row, false, seed % 2 == 0, seed);
          }
        }
      }
    }
  }, ThreadsOptions{60});
}

INSTANTIATE_TEST_SUITE_P(Collectives, AllToAll, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "W" + std::to_string(p.param);
                         });

// Nothing in the compiler or executor names the op: a program calling it compiles, produces its
// input in symmetric memory with no copy, runs on every rank, and explain prints the exchange.
TEST(AllToAllCompiled, RunsThroughTheCompilerAndExplainNamesItsExchange) {
  for (int ranks : {2, 3, 4}) {
    const std::string program = fmt::format(R"sf(graph a2a(x: f32[{}, 5]) {{
  y = aten::mul.Tensor(x, x)
  z = symm_mem::all_to_all(y, "world")
  return z
}}
)sf", 2 * ranks);
    api::CompiledProgram c = api::compile(api::Program::parse(program, {"a2a.sf", ranks}));
    const api::ExplainData& plan = c.explain();
    ASSERT_EQ(plan.collectives.size(), 1u);
    EXPECT_EQ(plan.collectives[0].op.rfind("symm_mem::all_to_all", 0), 0u)
        << plan.collectives[0].op;
    EXPECT_EQ(plan.collectives[0].cpu, "pull");
    EXPECT_EQ(plan.collectives[0].why,
              "barrier, read this rank's block of every peer's input, barrier");
    EXPECT_EQ(plan.copies.size(), 0u) << c.plan_text();
    std::mutex m;
    std::vector<std::string> failures;
    api::run_threads(ranks, [&](api::Rank& rank) {
      api::Session session(c, rank);
      Tensor x = Tensor::empty({2 * ranks, 5}, DType::f32);
      auto value = [](int r, int64_t i) { return double(r * 100 + i % 50 - 20); };
      fill(x, [&](int64_t i) { return value(rank.rank(), i); });
      for (int iter = 0; iter < 2; ++iter) {
        std::vector<Tensor> got = session.run({x});
        try {
          expect_values(got.at(0), [&](int64_t i) {
            const int64_t block = 2 * 5, p = i / block, k = i % block;
            const double v = value(int(p), rank.rank() * block + k);
            return v * v;
          }, fmt::format("compiled all_to_all at {} ranks, rank {}, run {}", ranks, rank.rank(),
                         iter));
        } catch (const std::exception& e) {
          std::lock_guard lock(m);
          failures.push_back(e.what());
        }
      }
    });
    EXPECT_TRUE(failures.empty()) << failures.front();
  }
}

TEST(AllToAllErrors, ShapesOutAndInputAreChecked) {
  Registry::global();
  run_threads(2, [](Runtime&) {
    Tensor odd = empty_symmetric({5, 3}, DType::f32, "world");
    EXPECT_EQ(usage_error_of([&] { call("symm_mem::all_to_all", {odd, "world"}); }),
              "symm_mem::all_to_all: dim 0 of argument 'input' (f32[5, 3]) is not divisible by "
              "the group size 2");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::all_to_all_out", {odd, "world", Tensor::empty({5, 3}, DType::f32)});
              }),
              "symm_mem::all_to_all_out: dim 0 of argument 'input' (f32[5, 3]) is not divisible "
              "by the group size 2");
    Tensor scalar = empty_symmetric({}, DType::f32, "world");
    EXPECT_EQ(usage_error_of([&] { call("symm_mem::all_to_all", {scalar, "world"}); }),
              "symm_mem::all_to_all: argument 'input' (f32[]) needs at least one dimension");
    Tensor in = empty_symmetric({4, 3}, DType::f32, "world");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::all_to_all_out", {in, "world", Tensor::empty({4, 2}, DType::f32)});
              }),
              "symm_mem::all_to_all_out: argument 'out' is f32[4, 2] but must be f32[4, 3] (like "
              "'input')");
    EXPECT_EQ(usage_error_of([&] {
                call("symm_mem::all_to_all_out", {in, "world", Tensor::empty({4, 3}, DType::bf16)});
              }),
              "symm_mem::all_to_all_out: argument 'out' is bf16[4, 3] but must be f32[4, 3] "
              "(like 'input')");
    EXPECT_EQ(usage_error_of([&] { call("symm_mem::all_to_all_out", {in, "world", in}); }),
              "symm_mem::all_to_all_out: argument 'out' overlaps argument 'input' in memory; "
              "peers read 'input' while this rank writes 'out', so they must be separate buffers");
    const std::string local = usage_error_of(
        [&] { call("symm_mem::all_to_all", {Tensor::empty({4, 3}, DType::f32), "world"}); });
    EXPECT_EQ(local.rfind("symm_mem::all_to_all: argument 'input'", 0), 0u) << local;
    EXPECT_EQ(usage_error_of([&] { call("symm_mem::all_to_all", {in, "nope"}); }).rfind(
                  "symm_mem::all_to_all: unknown group 'nope'", 0),
              0u);
  });
}

// The shape function refuses what the kernel would: a program with dim 0 not divisible by the
// group size does not compile (the torch bridge leaves such a node to PyTorch, naming why).
TEST(AllToAllErrors, TheShapeFunctionRefusesAnIndivisibleDim0) {
  const std::string program = R"sf(graph a2a(x: f32[5, 2]) {
  z = symm_mem::all_to_all(x, "world")
  return z
}
)sf";
  const std::string err =
      error_of([&] { api::compile(api::Program::parse(program, {"a2a.sf", 2})); });
  EXPECT_NE(err.find("symm_mem::all_to_all: dim 0 of argument 'input' (f32[5, 2]) is not "
                     "divisible by the group size 2"),
            std::string::npos)
      << err;
}

std::string message_of(const std::exception_ptr& p) {
  if (!p) return "<no error>";
  try {
    std::rethrow_exception(p);
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Ranks that call it with another dtype, or another shape of the same element count, all raise
// the collective agreement's error before any data moves.
TEST(AllToAllErrors, RanksThatDisagreeOnDtypeOrShapeAllRaise) {
  Registry::global();
  auto errors = run_threads_collect(2, [](Runtime& rt) {
    auto heap = SymmetricHeap::allocate(rt.group("world"), 256);
    DType t = rt.rank() == 0 ? DType::f32 : DType::i32;
    call("symm_mem::all_to_all", {symmetric_tensor(heap, 0, {4, 2}, t), "world"});
  }, ThreadsOptions{5});
  for (size_t r = 0; r < errors.size(); ++r) {
    EXPECT_EQ(message_of(errors[r]),
              "symm_mem::all_to_all: the ranks of group 'world' disagree on dtype (collective "
              "agreement; no data was exchanged):\n  dtype: f32 on rank 0; i32 on rank 1")
        << "rank " << r;
  }
  errors = run_threads_collect(2, [](Runtime& rt) {
    auto heap = SymmetricHeap::allocate(rt.group("world"), 256);
    const Shape shape = rt.rank() == 0 ? Shape{4, 3} : Shape{2, 6};
    call("symm_mem::all_to_all", {symmetric_tensor(heap, 0, shape, DType::f32), "world"});
  }, ThreadsOptions{5});
  for (size_t r = 0; r < errors.size(); ++r) {
    EXPECT_EQ(message_of(errors[r]),
              "symm_mem::all_to_all: the ranks of group 'world' disagree on argument (collective "
              "agreement; no data was exchanged):\n  argument: row_elements=3 on rank 0; "
              "row_elements=6 on rank 1")
        << "rank " << r;
  }
}

}  // namespace
}  // namespace symmflow::testing
