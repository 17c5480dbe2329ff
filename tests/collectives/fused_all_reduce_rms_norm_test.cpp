// symm_mem::fused_all_reduce_add_rms_norm (and _out) on threads, world sizes 1, 2, 3, 4, 8, dtypes
// f32, bf16, f16, f64, every reduce op, shapes with rows and hidden sizes of 1 and odd sizes:
//   - every element against a naive reference (all-reduce, add, rms_norm, all in f64) within a
//     tolerance of the dtype;
//   - bit for bit against the composition of the three eager ops (one_shot_all_reduce,
//     add.Tensor, rms_norm) on every rank, and the same bits on every rank;
//   - the _out variant into strided outputs (gaps untouched) and symmetric guard bytes untouched;
//   - the exact error text for bad shapes, dtypes and overlapping outputs.
#include <cmath>
#include <cstring>
#include <functional>

#include <gtest/gtest.h>

#include "collectives/workspace.hpp"
#include "support/errors.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/ops/registry.hpp"

namespace symmflow::testing {
namespace {

constexpr const char* kOp = "symm_mem::fused_all_reduce_add_rms_norm";
constexpr const char* kOpOut = "symm_mem::fused_all_reduce_add_rms_norm_out";
constexpr double kEps = 1e-5;

// Relative tolerance (to max(1, |want|)) of `out`: one rounding to the dtype plus the rounding
// of the sum of squares in acc_t.
double tolerance(DType d) {
  switch (d) {
    case DType::bf16:
      return 0x1.0p-7;
    case DType::f16:
      return 0x1.0p-10;
    case DType::f32:
      return 2e-5;
    default:
      return 1e-12;
  }
}

// The naive reference of one rank's call, in f64 with the op's two roundings to the dtype (the
// all-reduce's result and the sum, Note [fused all-reduce add rms_norm]): residual_out exactly,
// out before its final rounding.
struct Reference {
  Tensor summed;  // the dtype's
  std::vector<double> normed;
};

Reference reference(const std::vector<Tensor>& inputs, const Tensor& residual, const Tensor& weight,
                    const std::string& reduce_op) {
  const int w = int(inputs.size());
  const int64_t n = residual.shape().back(), numel = residual.numel();
  Tensor reduced = Tensor::empty(residual.shape(), residual.dtype());
  fill(reduced, [&](int64_t i) {
    return reduce_ref(reduce_op, DType::f64, w,
                      [&](int p) { return load_double(inputs[size_t(p)].view(), i); });
  });
  Reference ref{Tensor::empty(residual.shape(), residual.dtype()), {}};
  fill(ref.summed, [&](int64_t i) {
    return load_double(reduced.view(), i) + load_double(residual.view(), i);
  });
  auto s = [&](int64_t i) { return load_double(ref.summed.view(), i); };
  for (int64_t row = 0; row < numel / n; ++row) {
    double squares = 0;
    for (int64_t j = 0; j < n; ++j) squares += s(row * n + j) * s(row * n + j);
    const double scale = 1 / std::sqrt(squares / double(n) + kEps);
    for (int64_t j = 0; j < n; ++j)
      ref.normed.push_back(s(row * n + j) * scale * load_double(weight.view(), j));
  }
  return ref;
}

void expect_near(const Tensor& got, const std::vector<double>& want, double tol,
                 const std::string& where) {
  Tensor g = got.contiguous();
  for (int64_t i = 0; i < g.numel(); ++i) {
    const double v = load_double(g.view(), i), ref = want[size_t(i)];
    if (!(std::abs(v - ref) <= tol * std::max(1.0, std::abs(ref))))
      fail(fmt::format("{}: element {} of {} is {} but the f64 reference is {}", where, i, got.str(),
                       v, ref));
  }
}

void expect_bits(const Tensor& got, const Tensor& want, const std::string& where) {
  Tensor w = want.contiguous();
  expect_values(got, [&](int64_t i) { return load_double(w.view(), i); }, where);
}

// A tensor of `shape` whose elements are integers in [-15, 15] (exact in every dtype).
Tensor values_of(const Shape& shape, DType d, uint64_t seed, int rank) {
  Tensor t = Tensor::empty(shape, d);
  fill(t, [&](int64_t i) { return input_value(seed, rank, i); });
  return t;
}

// One case on every rank: the functional op, the composition, the reference, the _out variant.
void run_fused_case(Workspace& ws, DType d, const Shape& shape, const std::string& reduce_op,
                    uint64_t seed) {
  Group& g = ws.group();
  const int w = g.size(), me = g.rank();
  const std::string where = fmt::format("{} {} {} {} rank {} of {}", kOp, dtype_name(d),
                                        shape_str(shape), reduce_op, me, w);
  const int64_t n = shape.back();
  ws.begin(size_t(numel(shape)) * dtype_size(d), 1, seed);
  Tensor input = ws.carve(shape, d);
  Tensor mine = values_of(shape, d, seed, me);
  std::memcpy(input.raw_data(), mine.raw_data(), mine.nbytes());
  Tensor residual = values_of(shape, d, seed + 1, 1000);
  Tensor weight = values_of({n}, d, seed + 2, 2000);
  std::vector<Tensor> all_inputs;
  for (int p = 0; p < w; ++p) all_inputs.push_back(values_of(shape, d, seed, p));
  g.barrier(kTestChannel, "test");

  std::vector<Tensor> got =
      call(kOp, {input, residual, weight, kEps, reduce_op, ws.name()}).to_tensor_list();
  Value reduced = call("symm_mem::one_shot_all_reduce", {input, reduce_op, ws.name()});
  Tensor summed = call("aten::add.Tensor", {reduced, residual}).to_tensor();
  Tensor normed =
      call("aten::rms_norm", {summed, std::vector<int64_t>{n}, weight, kEps}).to_tensor();
  expect_bits(got[1], summed, where + " residual_out vs the composition");
  expect_bits(got[0], normed, where + " out vs the composition");
  Reference ref = reference(all_inputs, residual, weight, reduce_op);
  expect_bits(got[1], ref.summed, where + " residual_out vs the f64 reference");
  expect_near(got[0], ref.normed, tolerance(d), where + " out vs the f64 reference");
  expect_same_on_every_rank(g, got[0], where + " out");

  LocalOut out = LocalOut::make(shape, d, /*strided=*/true);
  LocalOut residual_out = LocalOut::make(shape, d, /*strided=*/true);
  call(kOpOut, {input, residual, weight, kEps, reduce_op, ws.name(), out.t, residual_out.t});
  expect_bits(out.t, normed, where + " _out: out");
  expect_bits(residual_out.t, summed, where + " _out: residual_out");
  out.check_gaps(where + " _out: out");
  residual_out.check_gaps(where + " _out: residual_out");
  expect_bits(input, mine, where + " input unchanged");
  ws.check_guards(where);
}

class FusedAllReduceRmsNorm : public ::testing::TestWithParam<int> {};

TEST_P(FusedAllReduceRmsNorm, EqualsReferenceAndComposition) {
  const int world = GetParam();
  ScopedTunables quick(oversubscribed_tunables());
  Registry::global();
  const std::vector<Shape> shapes = {{1}, {1, 1}, {3, 1}, {1, 7}, {5, 33}, {2, 3, 17}, {4, 1024}};
  const std::vector<DType> dtypes = {DType::f32, DType::bf16, DType::f16, DType::f64};
  run_threads(world, [&](Runtime& rt) {
    std::vector<int> reversed;
    for (int r = world - 1; r >= 0; --r) reversed.push_back(r);
    rt.new_group("g", reversed);
    Workspace ws(rt, "g");
    uint64_t seed = uint64_t(world) * 1000;
    for (DType d : dtypes) {
      for (const char* reduce_op : {"sum", "avg", "max", "min"}) {
        for (const Shape& shape : shapes) run_fused_case(ws, d, shape, reduce_op, ++seed);
      }
    }
  }, ThreadsOptions{60});
}

INSTANTIATE_TEST_SUITE_P(Collectives, FusedAllReduceRmsNorm, ::testing::Values(1, 2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "W" + std::to_string(p.param);
                         });


TEST(FusedAllReduceRmsNormErrors, ShapesDtypesAndOverlaps) {
  Registry::global();
  run_threads(2, [](Runtime& rt) {
    Tensor in = empty_symmetric({4, 8}, DType::f32, "world");
    Tensor res = Tensor::empty({4, 8}, DType::f32);
    Tensor wt = Tensor::empty({8}, DType::f32);
    EXPECT_EQ(usage_error_of([&] { call(kOp, {in, Tensor::empty({4, 7}, DType::f32), wt, kEps, "sum", "world"}); }),
              "symm_mem::fused_all_reduce_add_rms_norm: argument 'residual' is f32[4, 7] but must "
              "be f32[4, 8] (like 'input')");
    EXPECT_EQ(usage_error_of([&] { call(kOp, {in, res, Tensor::empty({4, 8}, DType::f32), kEps, "sum", "world"}); }),
              "symm_mem::fused_all_reduce_add_rms_norm: argument 'weight' is f32[4, 8] but must be "
              "f32[8] (the last dim of 'input')");
    EXPECT_EQ(usage_error_of([&] { call(kOp, {in, res, Tensor::empty({8}, DType::bf16), kEps, "sum", "world"}); }),
              "symm_mem::fused_all_reduce_add_rms_norm: argument 'weight' is bf16[8] but must be "
              "f32[8] (the last dim of 'input')");
    Tensor ints = empty_symmetric({4, 8}, DType::i32, "world");
    EXPECT_EQ(usage_error_of([&] {
                call(kOp, {ints, Tensor::empty({4, 8}, DType::i32), Tensor::empty({8}, DType::i32),
                           kEps, "sum", "world"});
              }),
              "symm_mem::fused_all_reduce_add_rms_norm: argument 'input' is i32[4, 8]; the op "
              "normalizes, so it needs a floating dtype (f32, bf16, f16, f64)");
    Tensor scalar = empty_symmetric({}, DType::f32, "world");
    EXPECT_EQ(usage_error_of([&] { call(kOp, {scalar, Tensor::empty({}, DType::f32), wt, kEps, "sum", "world"}); }),
              "symm_mem::fused_all_reduce_add_rms_norm: argument 'input' (f32[]) needs at least one "
              "dim to normalize over");
    EXPECT_EQ(usage_error_of([&] { call(kOp, {res, res, wt, kEps, "sum", "world"}); }),
              "symm_mem::fused_all_reduce_add_rms_norm: argument 'input' is not in symmetric "
              "memory; allocate it with symmflow::empty_symmetric(shape, dtype, \"world\") or let "
              "the compiler place it");
    EXPECT_EQ(usage_error_of([&] { call(kOp, {in, res, wt, kEps, "prod", "world"}); }).rfind(
                  "symm_mem::fused_all_reduce_add_rms_norm: unknown reduce_op 'prod'", 0),
              0u);
    // The _out variant: outputs of the wrong shape, or overlapping an argument or each other.
    Tensor out = Tensor::empty({4, 8}, DType::f32);
    EXPECT_EQ(usage_error_of([&] {
                call(kOpOut, {in, res, wt, kEps, "sum", "world", Tensor::empty({4, 9}, DType::f32), out});
              }),
              "symm_mem::fused_all_reduce_add_rms_norm_out: argument 'out' is f32[4, 9] but must "
              "be f32[4, 8] (like 'input')");
    EXPECT_EQ(usage_error_of([&] { call(kOpOut, {in, res, wt, kEps, "sum", "world", out, res}); }),
              "symm_mem::fused_all_reduce_add_rms_norm_out: output 'residual_out' overlaps "
              "argument 'residual' in memory; the op writes 'residual_out' while it still reads "
              "'residual', so they must be separate buffers");
    EXPECT_EQ(usage_error_of([&] { call(kOpOut, {in, res, wt, kEps, "sum", "world", out, out}); }),
              "symm_mem::fused_all_reduce_add_rms_norm_out: output 'out' overlaps argument "
              "'residual_out' in memory; the op writes 'out' while it still reads "
              "'residual_out', so they must be separate buffers");
    EXPECT_EQ(usage_error_of([&] { call(kOpOut, {in, res, wt, kEps, "sum", "world", in, out}); }),
              "symm_mem::fused_all_reduce_add_rms_norm_out: output 'out' overlaps argument "
              "'input' in memory; the op writes 'out' while it still reads 'input', so they must "
              "be separate buffers");
    // Every rank refused before communicating: the group still works.
    std::vector<Tensor> ok = call(kOp, {in, res, wt, kEps, "sum", "world"}).to_tensor_list();
    EXPECT_EQ(ok.size(), 2u);
  }, ThreadsOptions{10});
}

}  // namespace
}  // namespace symmflow::testing
