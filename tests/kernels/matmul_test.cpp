// aten::mm, addmm, bmm (+ out, addmm_) against a naive f64 triple loop: every supported dtype,
// empty and k = 0 products, vectors, odd sizes, transposed operands (passed to BLAS with a
// transpose flag), sliced operands (copied), strided outputs, bias broadcasting, beta = 0 with a
// NaN bias, and the error texts; in deterministic mode, rows that do not depend on the row count.
#include "test_util.hpp"

#include <algorithm>
#include <cstdlib>

#include "support/scoped_tunables.hpp"
#include "symmflow/runtime/runtime.hpp"

extern "C" int openblas_get_num_threads() __attribute__((weak));  // null unless OpenBLAS

namespace symmflow::test {
namespace {

// C = beta * bias + alpha * A @ B in f64; `scale` gets sum |terms| for tolerances.
std::vector<double> ref_mm(const Tensor& a, const Tensor& b, std::vector<double>* scale,
                           const Tensor* bias = nullptr, double beta = 0, double alpha = 1) {
  int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  std::vector<double> av = a.to_doubles(), bv = b.to_doubles(), biasv;
  if (bias) biasv = bias->to_doubles();
  std::vector<double> c(size_t(m * n));
  scale->assign(size_t(m * n), 0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0, s = 0;
      for (int64_t p = 0; p < k; ++p) {
        double t = av[size_t(i * k + p)] * bv[size_t(p * n + j)];
        acc += t;
        s += std::abs(t);
      }
      double v = alpha * acc;
      s = std::abs(alpha) * s;
      if (bias && beta != 0) {
        double bb = biasv[size_t(broadcast_index({i, j}, bias->shape()))];
        v += beta * bb;
        s += std::abs(beta * bb);
      }
      c[size_t(i * n + j)] = v;
      (*scale)[size_t(i * n + j)] = s;
    }
  }
  return c;
}

// Matrix dtypes: floats through BLAS, ints through the loop.
const DType kMatTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16,
                           DType::i8,  DType::i32, DType::i64, DType::u32};

struct MmCase {
  int64_t m, k, n;
  Layout la, lb;
};
const MmCase kMmCases[] = {
    {0, 3, 4, Layout::contiguous, Layout::contiguous},
    {3, 0, 4, Layout::contiguous, Layout::contiguous},  // k = 0: zeros
    {3, 4, 0, Layout::contiguous, Layout::contiguous},
    {1, 1, 1, Layout::contiguous, Layout::contiguous},
    {1, 9, 1, Layout::contiguous, Layout::transposed},
    {7, 5, 3, Layout::contiguous, Layout::contiguous},
    {7, 5, 3, Layout::transposed, Layout::contiguous},
    {7, 5, 3, Layout::contiguous, Layout::transposed},
    {6, 4, 5, Layout::transposed, Layout::transposed},
    {5, 6, 7, Layout::strided, Layout::strided},  // non-unit strides: copied
    {33, 17, 9, Layout::strided, Layout::transposed},
    // Note [few rows by gemv]: up to 4 rows of A, or one column of B, by gemv, every layout.
    {1, 37, 19, Layout::contiguous, Layout::transposed},  // a decode step's product
    {1, 37, 19, Layout::transposed, Layout::contiguous},
    {1, 37, 19, Layout::strided, Layout::strided},
    {3, 8, 11, Layout::transposed, Layout::transposed},
    {4, 8, 11, Layout::strided, Layout::contiguous},
    {5, 8, 11, Layout::contiguous, Layout::transposed},  // past 4 rows: gemm
    {9, 8, 1, Layout::contiguous, Layout::contiguous},
    {9, 8, 1, Layout::transposed, Layout::strided},
};

TEST(AtenMm, EveryDtypeShapeAndLayout) {
  for (DType dt : kMatTypes) {
    uint32_t seed = 1;
    for (const MmCase& c : kMmCases) {
      Tensor a = random_tensor({c.m, c.k}, dt, seed++, c.la);
      Tensor b = random_tensor({c.k, c.n}, dt, seed++, c.lb);
      std::string what = fmt::format("mm {} [{}, {}]{} x [{}, {}]{}", dtype_name(dt), c.m, c.k,
                                     layout_name(c.la), c.k, c.n, layout_name(c.lb));
      Tensor got = call_t("aten::mm", {a, b});
      ASSERT_EQ(got.shape(), (Shape{c.m, c.n})) << what;
      std::vector<double> scale;
      std::vector<double> want = ref_mm(a, b, &scale);
      expect_close(got, want, dt, what, scale);
    }
  }
}

TEST(AtenMm, OutVariantWritesOnlyOut) {
  for (DType dt : {DType::f32, DType::bf16, DType::i64}) {
    Tensor a = random_tensor({4, 6}, dt, 1, Layout::transposed);
    Tensor b = random_tensor({6, 3}, dt, 2);
    Tensor out = strided_out({4, 3}, dt);
    EXPECT_TRUE(call("aten::mm.out", {a, b}, {{"out", out}}).is_none());
    std::vector<double> scale;
    std::vector<double> want = ref_mm(a, b, &scale);
    expect_close(out, want, dt, fmt::format("mm.out {}", dtype_name(dt)), scale);
    expect_untouched(out, 77, "mm.out");
  }
}

TEST(AtenAddmm, BiasBroadcastBetaAlpha) {
  struct Case {
    Shape bias;
    double beta, alpha;
  };
  const Case cases[] = {{{5}, 1, 1}, {{1, 5}, 0.5, 2}, {{4, 1}, -1, 0.25},
                        {{4, 5}, 2, -1}, {{}, 1, 1},    {{4, 5}, 0, 1}};
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    uint32_t seed = 10;
    for (const Case& c : cases) {
      Tensor bias = random_tensor(c.bias, dt, seed++);
      Tensor a = random_tensor({4, 7}, dt, seed++, Layout::transposed);
      Tensor b = random_tensor({7, 5}, dt, seed++, Layout::strided);
      std::string what = fmt::format("addmm {} bias {} beta {} alpha {}", dtype_name(dt),
                                     shape_str(c.bias), c.beta, c.alpha);
      Tensor got = call_t("aten::addmm", {bias, a, b}, {{"beta", c.beta}, {"alpha", c.alpha}});
      std::vector<double> scale;
      std::vector<double> want = ref_mm(a, b, &scale, &bias, c.beta, c.alpha);
      expect_close(got, want, dt, what, scale);
    }
  }
}

TEST(AtenAddmm, IntegerAndZeroBetaIgnoresNan) {
  Tensor bias = random_tensor({3}, DType::i32, 1);
  Tensor a = random_tensor({2, 4}, DType::i32, 2);
  Tensor b = random_tensor({4, 3}, DType::i32, 3);
  Tensor got = call_t("aten::addmm", {bias, a, b}, {{"beta", int64_t(2)}, {"alpha", int64_t(3)}});
  std::vector<double> scale;
  expect_close(got, ref_mm(a, b, &scale, &bias, 2, 3), DType::i32, "addmm i32", scale);

  Tensor nan_bias = Tensor::full({2, 3}, DType::f32, NAN);
  Tensor af = random_tensor({2, 4}, DType::f32, 4), bf = random_tensor({4, 3}, DType::f32, 5);
  Tensor r = call_t("aten::addmm", {nan_bias, af, bf}, {{"beta", 0}});
  expect_close(r, ref_mm(af, bf, &scale), DType::f32, "addmm beta=0", scale);
}

TEST(AtenAddmm, OutAndInPlace) {
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor a = random_tensor({3, 4}, dt, 1);
    Tensor b = random_tensor({4, 5}, dt, 2, Layout::transposed);
    Tensor bias = random_tensor({5}, dt, 3);
    std::vector<double> scale;
    std::vector<double> want = ref_mm(a, b, &scale, &bias, 0.5, 2);
    Tensor out = strided_out({3, 5}, dt);
    call("aten::addmm.out", {bias, a, b}, {{"beta", 0.5}, {"alpha", 2}, {"out", out}});
    expect_close(out, want, dt, "addmm.out", scale);
    expect_untouched(out, 77, "addmm.out");

    for (bool strided : {false, true}) {
      Tensor self = strided ? strided_out({3, 5}, dt) : Tensor::empty({3, 5}, dt);
      Tensor full_bias = random_tensor({3, 5}, dt, 4);
      std::vector<double> bv = full_bias.to_doubles();
      for (int64_t i = 0; i < 15; ++i) {
        int64_t off = (i / 5) * self.strides()[0] + (i % 5) * self.strides()[1];
        store_double(self.view(), off, bv[size_t(i)]);
      }
      std::vector<double> want2 = ref_mm(a, b, &scale, &full_bias, 0.5, 2);
      EXPECT_TRUE(call("aten::addmm_", {self, a, b}, {{"beta", 0.5}, {"alpha", 2}}).is_none());
      expect_close(self, want2, dt, fmt::format("addmm_ strided={}", strided), scale);
      if (strided) expect_untouched(self, 77, "addmm_");
    }
  }
}

TEST(AtenBmm, BatchesAndLayouts) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32}) {
    uint32_t seed = 40;
    for (int64_t batch : {0, 1, 3}) {
      for (Layout la : {Layout::contiguous, Layout::transposed, Layout::strided}) {
        Tensor a = random_tensor({batch, 5, 4}, dt, seed++, la);
        Tensor b = random_tensor({batch, 4, 6}, dt, seed++, Layout::transposed);
        std::string what = fmt::format("bmm {} batch {} {}", dtype_name(dt), batch, layout_name(la));
        Tensor got = call_t("aten::bmm", {a, b});
        ASSERT_EQ(got.shape(), (Shape{batch, 5, 6})) << what;
        std::vector<double> want, scale;
        for (int64_t i = 0; i < batch; ++i) {
          Tensor ai = a.as_strided({5, 4}, {a.strides()[1], a.strides()[2]}, i * a.strides()[0]);
          Tensor bi = b.as_strided({4, 6}, {b.strides()[1], b.strides()[2]}, i * b.strides()[0]);
          std::vector<double> s;
          std::vector<double> w = ref_mm(ai, bi, &s);
          want.insert(want.end(), w.begin(), w.end());
          scale.insert(scale.end(), s.begin(), s.end());
        }
        expect_close(got, want, dt, what, scale);
        Tensor out = strided_out({batch, 5, 6}, dt);
        call("aten::bmm.out", {a, b}, {{"out", out}});
        expect_close(out, want, dt, what + " out", scale);
        expect_untouched(out, 77, what + " out");
      }
    }
  }
}

TEST(AtenMatmul, Errors) {
  Tensor a = random_tensor({2, 3}, DType::f32, 1);
  Tensor b = random_tensor({4, 5}, DType::f32, 2);
  expect_error([&] { call("aten::mm", {a, b}); },
               "aten::mm: self has shape [2, 3] and mat2 has shape [4, 5]; inner dimensions 3 and 4 "
               "differ");
  expect_error([&] { call("aten::mm", {random_tensor({3}, DType::f32, 1), b}); },
               "aten::mm: self must be a matrix (2-D), got shape [3]");
  expect_error([&] { call("aten::mm", {a, random_tensor({3, 2}, DType::f64, 3)}); },
               "aten::mm: self has dtype f32 and mat2 has dtype f64; expected the same dtype");
  Tensor bools = random_tensor({2, 2}, DType::boolean, 4);
  expect_error([&] { call("aten::mm", {bools, bools}); },
               "aten::mm: self has dtype bool, which is not supported");
  expect_error([&] { call("aten::mm.out", {a, random_tensor({3, 2}, DType::f32, 5)},
                          {{"out", Tensor::empty({2, 3}, DType::f32)}}); },
               "aten::mm.out: out has shape [2, 3] but the result has shape [2, 2]");
  expect_error([&] { call("aten::mm.out", {a, random_tensor({3, 2}, DType::f32, 5)},
                          {{"out", Tensor::empty({2, 2}, DType::f64)}}); },
               "aten::mm.out: out has dtype f64 but the result has dtype f32");
  expect_error([&] { call("aten::bmm", {random_tensor({2, 2, 3}, DType::f32, 6),
                                        random_tensor({3, 3, 2}, DType::f32, 7)}); },
               "aten::bmm: self has shape [2, 2, 3] and mat2 has shape [3, 3, 2]; batch sizes 2 "
               "and 3 differ");
  expect_error([&] { call("aten::addmm", {random_tensor({3}, DType::f32, 8), a,
                                          random_tensor({3, 4}, DType::f32, 9)}); },
               "aten::addmm: self with shape [3] does not broadcast to the product's shape [2, 4]");
}

// Note [BLAS threads per rank]: a product on a rank of a host with two ranks leaves OpenBLAS with
// the rank's share of the usable CPUs.
TEST(MatmulBlasThreads, EachRankTakesItsShareOfTheCpus) {
  if (!openblas_get_num_threads) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  if (std::getenv("OPENBLAS_NUM_THREADS") || std::getenv("OMP_NUM_THREADS"))
    GTEST_SKIP() << "the environment chose the BLAS threads";
  run_threads(2, [&](Runtime& rt) {
    Tensor a = Tensor::full({4, 4}, DType::f32, 1.0);
    Tensor p = aten::mm(a, a);
    EXPECT_EQ(p.item_as_double(std::vector<int64_t>{0, 0}), 4.0);
    const Bootstrap& b = rt.bootstrap();
    EXPECT_EQ(openblas_get_num_threads(), std::max(1, b.local_cpus() / b.local_ranks()));
  });
}

}  // namespace
}  // namespace symmflow::test

namespace symmflow::test {
namespace {

// Note [batch-invariant products]: with deterministic on, row 0 of A[m, k] @ B is the same bits
// for every row count m (a sequence decoded alone or in a batch), any row the same as alone, equal to the fixed-order sum
// from zero over p ascending in the accumulation type, for f32, f64 and bf16, with B contiguous,
// transposed (a linear layer's weight) and strided; addmm's bias and scales after the sum.
TEST(AtenMm, DeterministicRowsDoNotDependOnTheRowCount) {
  Tunables t = tunables();
  t.deterministic = true;
  testing::ScopedTunables on(t);
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (Layout lb : {Layout::contiguous, Layout::transposed, Layout::strided}) {
      const int64_t k = 131, n = 37;  // three panels of k; a column tile cut short
      Tensor a = random_tensor({33, k}, dt, 7);
      Tensor b = random_tensor({k, n}, dt, 8, lb);
      Tensor bias = random_tensor({n}, dt, 9);
      // The fixed order, written out (panels of 64 of k, each summed from zero and added to the
      // running total): float accumulation for bf16 and f32, double for f64.
      std::vector<double> av = a.to_doubles(), bv = b.to_doubles();
      std::vector<double> want(static_cast<size_t>(n));
      auto fixed_order = [&](auto zero, int64_t j) {
        decltype(zero) total = 0;
        for (int64_t p0 = 0; p0 < k; p0 += 64) {
          decltype(zero) panel = 0;
          for (int64_t p = p0; p < std::min<int64_t>(k, p0 + 64); ++p)
            panel += decltype(zero)(av[size_t(p)]) * decltype(zero)(bv[size_t(p * n + j)]);
          total += panel;
        }
        return total;
      };
      for (int64_t j = 0; j < n; ++j) {
        if (dt == DType::f64) {
          want[size_t(j)] = fixed_order(0.0, j);
        } else {
          const float v = fixed_order(0.0f, j);
          want[size_t(j)] = dt == DType::bf16 ? double(float(BFloat16(v))) : double(v);
        }
      }
      std::vector<double> first;
      for (int64_t m : {1, 2, 3, 4, 8, 33}) {
        Tensor rows = call("aten::slice.Tensor", {a, int64_t(0), int64_t(0), m}).to_tensor();
        std::vector<double> got = call("aten::mm", {rows, b}).to_tensor().to_doubles();
        std::vector<double> row0(got.begin(), got.begin() + n);
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(row0[size_t(j)], want[size_t(j)])
              << dtype_name(dt) << " layout " << int(lb) << " m " << m << " column " << j;
        std::vector<double> biased =
            call("aten::addmm", {bias, rows, b}, {{"beta", 0.5}, {"alpha", 2.0}})
                .to_tensor()
                .to_doubles();
        if (first.empty()) first.assign(biased.begin(), biased.begin() + n);
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(biased[size_t(j)], first[size_t(j)]) << dtype_name(dt) << " addmm m " << m;
      }
      // Where a row sits does not matter either: row r of all 33 is row r multiplied alone.
      std::vector<double> all = call("aten::mm", {a, b}).to_tensor().to_doubles();
      for (int64_t r : {1, 5, 6, 32}) {
        Tensor one = call("aten::slice.Tensor", {a, int64_t(0), r, r + 1}).to_tensor();
        std::vector<double> alone = call("aten::mm", {one, b}).to_tensor().to_doubles();
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(all[size_t(r * n + j)], alone[size_t(j)]) << dtype_name(dt) << " row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace symmflow::test
