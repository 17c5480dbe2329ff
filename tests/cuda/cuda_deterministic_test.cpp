// Deterministic mode on GPUs (SYMMFLOW_DETERMINISTIC=1; Note [skinny GEMM rows] in
// src/kernels/cuda/gemm/skinny_gemm.cu, Note [batch-invariant attention] in
// src/kernels/cuda/attention/aten_attention.cpp): a row's bits do not depend on how many rows
// are computed with it. aten::mm (bf16 and f16 through the skinny kernel's rows, f32 and shapes it
// refuses through the ordered GEMM, weights in both layouts), aten::bmm and attention (decode
// and prefill rows, grouped key/value heads) are run on the first rows alone and inside larger
// batches, compared bit for bit, and against the CPU kernels within a rounding; a GPU plan binds
// and runs in the mode. Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/scoped_tunables.hpp"
#include "support/tensors.hpp"

#include "kernels/cuda/gemm/skinny_gemm.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::cuda {
namespace {

class CudaDeterministic : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no GPU";
    bind_device();
    Tunables t = tunables();
    t.deterministic = true;
    on_.emplace(t);
  }
  void TearDown() override { on_.reset(); }
  std::optional<testing::ScopedTunables> on_;
};

Tensor random(const Shape& shape, DType dtype, uint64_t seed) {
  return symmflow::testing::random_tensor(shape, dtype, seed, -1, 1);
}

// Rows [0, rows) of a host tensor's first dim.
Tensor first(const Tensor& t, int64_t rows) { return aten::clone(aten::slice(t, 0, 0, rows)); }

void expect_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  std::vector<double> a = got.to_doubles(), b = want.to_doubles();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << what << " element " << i;
}

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  std::vector<double> a = got.to_doubles(), b = want.to_doubles();
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_LE(std::abs(a[i] - b[i]), tol * std::max(1.0, std::abs(b[i]))) << what << " element " << i;
}

double tolerance(DType d) { return d == DType::f32 ? 1e-5 : 2e-2; }

TEST_F(CudaDeterministic, MmRowsDoNotDependOnTheRowCount) {
  struct Case {
    int64_t k, n;
    bool transposed;  // w as nn.Linear holds it: [n, k], read through its transpose
  };
  for (DType d : {DType::bf16, DType::f16, DType::f32}) {
    for (Case c : {Case{512, 256, false}, Case{512, 256, true}, Case{100, 37, false},
                   Case{1000, 24, true}}) {
      const std::string what = fmt::format("{} k {} n {}{}", dtype_name(d), c.k, c.n,
                                           c.transposed ? " w transposed" : "");
      Tensor x = random({300, c.k}, d, uint64_t(c.k + c.n));
      Tensor w = c.transposed ? random({c.n, c.k}, d, 7) : random({c.k, c.n}, d, 7);
      Tensor gw = to_device(w);
      Tensor gw_used = c.transposed ? aten::t(gw) : gw;
      Tensor w_used = c.transposed ? aten::t(w) : w;
      // The skinny kernel's rows take bf16 and f16 when n and k are multiples of 8.
      const bool skinny = d != DType::f32 && c.n % 8 == 0 && c.k % 8 == 0;
      Tensor alone;
      for (int64_t rows : {1, 3, 16, 17, 64, 300}) {
        const int64_t launched = skinny_gemm_launches();
        Tensor got = to_host(aten::mm(to_device(first(x, rows)), gw_used));
        EXPECT_EQ(skinny_gemm_launches(), launched + (skinny ? 1 : 0)) << what << " rows " << rows;
        expect_close(got, aten::mm(first(x, rows), w_used), tolerance(d),
                     fmt::format("{} rows {} against the cpu", what, rows));
        if (rows == 1) alone = got;
        expect_bits(first(got, 1), alone, fmt::format("{}: row 0 of {} rows against alone", what, rows));
        if (rows == 300) {
          Tensor seventeen = to_host(aten::mm(to_device(first(x, 17)), gw_used));
          expect_bits(first(got, 17), seventeen, what + ": rows 0..16 of 300 against 17");
        }
      }
    }
  }
}

TEST_F(CudaDeterministic, BmmRowsDoNotDependOnTheBatch) {
  for (DType d : {DType::bf16, DType::f32}) {
    Tensor a = random({8, 5, 64}, d, 3), b = random({8, 64, 40}, d, 4);
    Tensor all = to_host(aten::bmm(to_device(a), to_device(b)));
    Tensor one = to_host(aten::bmm(to_device(first(a, 1)), to_device(first(b, 1))));
    expect_bits(first(all, 1), one, std::string(dtype_name(d)) + " bmm: batch 0 of 8 against alone");
    expect_close(all, aten::bmm(a, b), tolerance(d), std::string(dtype_name(d)) + " bmm against the cpu");
  }
}

// Decode (one query row against a cache of keys) and prefill (causal) at batch 1 and 8; grouped
// key/value heads (8 query heads, 2 kv heads).
TEST_F(CudaDeterministic, AttentionRowsDoNotDependOnTheBatch) {
  for (DType d : {DType::bf16, DType::f32}) {
    for (int64_t q_len : {1, 37}) {
      const int64_t kv = 300;
      const bool causal = q_len > 1;
      Tensor q = random({8, 8, q_len, 64}, d, 5);
      Tensor k = random({8, 2, causal ? q_len : kv, 64}, d, 6);
      Tensor v = random({8, 2, causal ? q_len : kv, 64}, d, 7);
      auto sdpa = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv) {
        return call("aten::scaled_dot_product_attention", {qq, kk, vv},
                    {{"is_causal", causal}, {"enable_gqa", true}})
            .to_tensor();
      };
      const std::string what = fmt::format("{} q_len {}", dtype_name(d), q_len);
      Tensor all = to_host(sdpa(to_device(q), to_device(k), to_device(v)));
      Tensor one = to_host(sdpa(to_device(first(q, 1)), to_device(first(k, 1)), to_device(first(v, 1))));
      expect_bits(first(all, 1), one, what + ": batch 0 of 8 against alone");
      expect_close(all, sdpa(q, k, v), d == DType::f32 ? 1e-5 : 2e-2, what + " against the cpu");
    }
  }
  const std::string choices = format_kernel_choices();
  EXPECT_NE(choices.find("SYMMFLOW_DETERMINISTIC=1"), std::string::npos) << choices;
}

}  // namespace
}  // namespace symmflow::cuda
