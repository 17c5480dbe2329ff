// The cuda backend's aten kernels against the cpu kernels on the same inputs: pointwise ops in
// every overload (bitwise for add/sub/mul/div, a few ulps for transcendental functions), copies
// between host and GPU with every dtype conversion and strided views, matmul through cuBLAS and
// the skinny kernel (and which one each shape takes),
// rms_norm, softmax, sum/mean over every subset of dims, cat, and the refusals (no kernel, capture-time allocation). Awkward sizes
// (0, 1, 7, 1023, 4099) everywhere. Skipped without a GPU.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
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

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no GPU";
    bind_device();
  }
};

Tensor random(const Shape& shape, DType dtype, uint64_t seed, double lo = -2, double hi = 2) {
  return symmflow::testing::random_tensor(shape, dtype, seed, lo, hi);
}

// Every element of `got` (from the GPU) against `want` (from the cpu): equal bits when tol is 0,
// else within tol relative to max(|want|, 1).
void expect_close(const Tensor& got_gpu, const Tensor& want, double tol, const std::string& what) {
  Tensor got = to_host(got_gpu);
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  std::vector<double> a = got.to_doubles(), b = want.to_doubles();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (tol == 0) {
      ASSERT_EQ(a[i], b[i]) << what << " element " << i;
    } else {
      ASSERT_LE(std::abs(a[i] - b[i]), tol * std::max(1.0, std::abs(b[i]))) << what << " element " << i;
    }
  }
}

double ulps(DType d) {
  switch (d) {
    case DType::bf16: return 8e-3;
    case DType::f16: return 1e-3;
    case DType::f32: return 2e-6;
    default: return 1e-12;
  }
}

const std::vector<int64_t> kSizes = {0, 1, 7, 1023, 4099};
const std::vector<DType> kFloats = {DType::f32, DType::bf16, DType::f16, DType::f64};

TEST_F(CudaOps, BinaryOpsEqualCpuBitwise) {
  for (DType d : kFloats) {
    for (int64_t n : kSizes) {
      Tensor a = random({n}, d, 1), b = random({n}, d, 2, 0.5, 3);
      Tensor ga = to_device(a), gb = to_device(b);
      for (const char* op : {"aten::add.Tensor", "aten::sub.Tensor", "aten::mul.Tensor",
                             "aten::div.Tensor"}) {
        std::string what = fmt::format("{} {} n={}", op, dtype_name(d), n);
        Tensor want = call(op, {a, b}).to_tensor();
        expect_close(call(op, {ga, gb}).to_tensor(), want, 0, what);
      }
      KwArgs alpha{{"alpha", 0.375}};
      expect_close(call("aten::add.Tensor", {ga, gb}, alpha).to_tensor(),
                   call("aten::add.Tensor", {a, b}, alpha).to_tensor(), 0, "add alpha");
      expect_close(call("aten::sub.Scalar", {ga, 1.3}, alpha).to_tensor(),
                   call("aten::sub.Scalar", {a, 1.3}, alpha).to_tensor(), 0, "sub.Scalar alpha");
      expect_close(call("aten::mul.Scalar", {ga, 1.000244140625}).to_tensor(),
                   call("aten::mul.Scalar", {a, 1.000244140625}).to_tensor(), 0, "mul.Scalar");
    }
  }
}

TEST_F(CudaOps, BroadcastMixedDtypesAndInPlace) {
  Tensor a = random({5, 7}, DType::bf16, 3), row = random({7}, DType::f32, 4);
  Tensor ga = to_device(a), grow = to_device(row);
  expect_close(call("aten::add.Tensor", {ga, grow}).to_tensor(),
               call("aten::add.Tensor", {a, row}).to_tensor(), 0, "broadcast bf16 + f32 row");
  // In place on a strided view (a transposed matrix).
  Tensor at = call("aten::t", {a}).to_tensor();
  Tensor gat = call("aten::t", {ga}).to_tensor();
  Tensor c = random({7, 5}, DType::bf16, 5);
  call("aten::mul_.Tensor", {at, c});
  call("aten::mul_.Tensor", {gat, to_device(c)});
  expect_close(ga, a, 0, "in-place mul through a transposed view");
}

TEST_F(CudaOps, UnaryOpsWithinUlps) {
  for (DType d : kFloats) {
    for (int64_t n : kSizes) {
      Tensor a = random({n}, d, 6, -3, 3);
      Tensor ga = to_device(a);
      for (const char* op : {"aten::sin", "aten::cos", "aten::exp", "aten::tanh", "aten::relu",
                             "aten::gelu", "aten::silu", "aten::sigmoid", "aten::neg"}) {
        std::string what = fmt::format("{} {} n={}", op, dtype_name(d), n);
        expect_close(call(op, {ga}).to_tensor(), call(op, {a}).to_tensor(), 4 * ulps(d), what);
      }
      KwArgs tanh{{"approximate", "tanh"}};
      expect_close(call("aten::gelu", {ga}, tanh).to_tensor(), call("aten::gelu", {a}, tanh).to_tensor(),
                   4 * ulps(d), "gelu tanh");
    }
  }
}

// Note [integer pointwise on GPUs]: add, sub and mul of integers run on the GPU (equal to the
// CPU); the other pointwise ops take floats only and say so, naming the op.
TEST_F(CudaOps, IntegerArithmeticOnlyAddSubMul) {
  Tensor x = random({4}, DType::i32, 7);
  Tensor g = to_device(x);
  expect_close(call("aten::add.Tensor", {g, g}).to_tensor(), call("aten::add.Tensor", {x, x}).to_tensor(),
               0, "i32 add");
  try {
    call("aten::neg", {g});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("aten::neg: dtype i32 has no cuda kernel"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CudaOps, CopiesConvertEveryDtype) {
  const std::vector<DType> all = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i8,
                                  DType::i32, DType::i64, DType::u32, DType::boolean};
  for (DType from : all) {
    for (DType to : all) {
      Tensor src = random({3, 1023}, from, 8);
      Tensor want = Tensor::empty({3, 1023}, to);
      call("aten::copy_", {want, src});
      Tensor got = Tensor::empty({3, 1023}, to, Device::cuda(0));
      call("aten::copy_", {got, to_device(src)});  // device to device with conversion
      expect_close(got, want, 0, fmt::format("copy {} -> {}", dtype_name(from), dtype_name(to)));
    }
  }
  // Host -> strided device view -> host.
  Tensor host = random({4, 6}, DType::f32, 9);
  Tensor dev = Tensor::empty({6, 4}, DType::f32, Device::cuda(0));
  Tensor view = call("aten::t", {dev}).to_tensor();
  call("aten::copy_", {view, host});
  expect_close(view, host, 0, "host into a transposed device view");
  Tensor back = Tensor::empty({4, 6}, DType::f32);
  call("aten::copy_", {back, view});
  synchronize();
  expect_close(to_device(back), host, 0, "strided device view back to host");
}

TEST_F(CudaOps, FactoriesFillOnTheGpu) {
  Tensor out = Tensor::empty({3, 5}, DType::bf16, Device::cuda(0));
  call("aten::full.out", {std::vector<int64_t>{3, 5}, 2.5}, {{"out", out}});
  expect_close(out, Tensor::full({3, 5}, DType::bf16, 2.5), 0, "full.out");
  call("aten::zeros.out", {std::vector<int64_t>{3, 5}}, {{"out", out}});
  expect_close(out, Tensor::zeros({3, 5}, DType::bf16), 0, "zeros.out");
}

TEST_F(CudaOps, MatmulMatchesCpu) {
  struct Case {
    int64_t m, k, n;
  };
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (Case c : {Case{1, 1, 1}, Case{7, 13, 5}, Case{16, 256, 128}, Case{33, 0, 9}, Case{0, 4, 3}}) {
      Tensor a = random({c.m, c.k}, d, 10, -1, 1), b = random({c.k, c.n}, d, 11, -1, 1);
      std::string what = fmt::format("mm {} {}x{}x{}", dtype_name(d), c.m, c.k, c.n);
      double tol = d == DType::f32 ? 1e-5 : d == DType::f64 ? 1e-12 : 2e-2;
      expect_close(call("aten::mm", {to_device(a), to_device(b)}).to_tensor(),
                   call("aten::mm", {a, b}).to_tensor(), tol, what);
      // Transposed operands go to cuBLAS as they are.
      Tensor bt = random({c.n, c.k}, d, 12, -1, 1);
      Tensor gbt = call("aten::t", {to_device(bt)}).to_tensor();
      expect_close(call("aten::mm", {to_device(a), gbt}).to_tensor(),
                   call("aten::mm", {a, call("aten::t", {bt}).to_tensor()}).to_tensor(), tol,
                   what + " transposed");
    }
  }
  Tensor x = random({3, 5, 7}, DType::f32, 13), y = random({3, 7, 2}, DType::f32, 14);
  expect_close(call("aten::bmm", {to_device(x), to_device(y)}).to_tensor(),
               call("aten::bmm", {x, y}).to_tensor(), 1e-5, "bmm");
  Tensor bias = random({4}, DType::f32, 15), m1 = random({6, 3}, DType::f32, 16),
         m2 = random({3, 4}, DType::f32, 17);
  KwArgs ab{{"beta", 0.5}, {"alpha", 2.0}};
  expect_close(call("aten::addmm", {to_device(bias), to_device(m1), to_device(m2)}, ab).to_tensor(),
               call("aten::addmm", {bias, m1, m2}, ab).to_tensor(), 1e-5, "addmm");
}

// Runs f with GEMMs of few rows sent to cuBLAS instead of the skinny kernel.
template <typename F>
auto with_cublas_only(F&& f) {
  Tunables t = tunables();
  t.cuda_skinny_gemm_max_rows = 0;
  testing::ScopedTunables cublas(t);
  return f();
}

TEST(SkinnyGemm, TakesExactlyTheShapesItCanLoad) {
  alignas(16) static char buf[64];
  SkinnyGemm g{buf, buf, buf, 16, 4096, 4096, 4096, 4096, 4096};
  EXPECT_TRUE(skinny_gemm_fits(g, 16, 132));
  EXPECT_FALSE(skinny_gemm_fits(g, 8, 132)) << "more rows than the tunable allows";
  EXPECT_FALSE(skinny_gemm_fits(g, 0, 132)) << "0 turns the kernel off";
  EXPECT_FALSE(skinny_gemm_fits(g, 16, 100)) << "128 blocks: more than one wave";
  EXPECT_TRUE(skinny_gemm_fits(g, 16, 256)) << "128 blocks: half of 256 multiprocessors";
  // Note [skinny GEMM split]: fewer blocks than half the multiprocessors split k over a cluster.
  EXPECT_EQ(skinny_gemm_split(g, 16, 132), 1);
  EXPECT_EQ(skinny_gemm_split(g, 16, 257), 2) << "128 blocks: split in 2 for 257 multiprocessors";
  auto split_for = [&](int64_t n) {
    SkinnyGemm c = g;
    c.n = n, c.ldw = n, c.ldy = n;
    return skinny_gemm_split(c, 16, 132);
  };
  EXPECT_EQ(split_for(2048), 2) << "64 column blocks";
  EXPECT_EQ(split_for(1024), 4);
  EXPECT_EQ(split_for(512), 8) << "a TP2 decoder's k or v projection";
  EXPECT_EQ(split_for(256), 0) << "8 blocks of 8: still less than half";
  EXPECT_EQ(split_for(5504), 0) << "172 blocks: more than one wave";
  auto with = [&](auto edit) {
    SkinnyGemm c = g;
    edit(c);
    return skinny_gemm_fits(c, 16, 132);
  };
  EXPECT_TRUE(with([](SkinnyGemm& c) { c.m = 1; }));
  EXPECT_FALSE(with([](SkinnyGemm& c) { c.m = 0; }));
  EXPECT_FALSE(with([](SkinnyGemm& c) { c.m = 17; }));
  EXPECT_FALSE(with([](SkinnyGemm& c) { c.n = 4100; }));
  EXPECT_FALSE(with([](SkinnyGemm& c) { c.k = 4095; }));
  EXPECT_FALSE(with([](SkinnyGemm& c) { c.ldw = 4097; }));
  EXPECT_FALSE(with([](SkinnyGemm& c) { c.ldx = 4100; }));
  EXPECT_FALSE(with([&](SkinnyGemm& c) { c.w = buf + 2; })) << "w not 16-byte aligned";
  EXPECT_FALSE(with([&](SkinnyGemm& c) { c.x = buf + 8; })) << "x not 16-byte aligned";
  // w stored transposed ([n, k] rows, nn.Linear's weight): its leading dim covers k, not n.
  EXPECT_TRUE(with([](SkinnyGemm& c) { c.w_t = true, c.n = 2560, c.k = 1024, c.ldw = 1024; }));
  EXPECT_FALSE(with([](SkinnyGemm& c) { c.n = 2560, c.k = 1024, c.ldw = 1024; }))
      << "ldw below n without w_t";
  EXPECT_FALSE(with([](SkinnyGemm& c) { c.w_t = true, c.k = 1024, c.ldw = 1000; }))
      << "ldw below k with w_t";
}

TEST_F(CudaOps, SkinnyMatmulMatchesCpuAndCublas) {
  struct Case {
    int64_t m, k, n;
  };
  // The kernel itself on awkward shapes (k and n off its 32-wide tiles, k below one stage per
  // warp, m of 1 to 16), launched directly: mm sends most of these to cuBLAS.
  for (DType d : {DType::bf16, DType::f16}) {
    for (Case c : {Case{1, 8, 8}, Case{16, 4096, 256}, Case{5, 1032, 40}, Case{16, 24, 4104},
                   Case{9, 520, 104}, Case{3, 64, 8200}}) {
      std::string what = fmt::format("skinny {} {}x{}x{}", dtype_name(d), c.m, c.k, c.n);
      Tensor a = random({c.m, c.k}, d, 20, -1, 1), b = random({c.k, c.n}, d, 21, -1, 1);
      Tensor ga = to_device(a), gb = to_device(b);
      Tensor got = Tensor::empty({c.m, c.n}, d, ga.device());
      SkinnyGemm g{ga.raw_data(), gb.raw_data(), got.raw_data(), c.m, c.n, c.k, c.k, c.n, c.n};
      g.f16 = d == DType::f16;
      ASSERT_EQ(cudaError_t(launch_skinny_gemm(g, current_stream())), cudaSuccess) << what;
      expect_close(got, aten::mm(a, b), 2e-2, what);
      // k split over clusters of 2 and 8 blocks (shares of no stage included): the same sums.
      for (int split : {2, 8}) {
        Tensor got_s = Tensor::empty({c.m, c.n}, d, ga.device());
        SkinnyGemm gs = g;
        gs.y = got_s.raw_data();
        gs.split = split;
        ASSERT_EQ(cudaError_t(launch_skinny_gemm(gs, current_stream())), cudaSuccess) << what;
        expect_close(got_s, aten::mm(a, b), 2e-2, fmt::format("{} split {}", what, split));
        expect_close(got_s, to_host(got), 1e-2, fmt::format("{} split {} vs none", what, split));
      }
      expect_close(got, to_host(with_cublas_only([&] { return aten::mm(ga, gb); })), 1e-2,
                   what + " against cuBLAS");
      // The same weight stored transposed ([n, k], ldw past k: a slice of wider rows).
      Tensor bt = random({c.n, c.k + 8}, d, 29, -1, 1);
      Tensor hb = aten::slice(bt, 1, 0, c.k), gbt = to_device(bt);
      Tensor got_t = Tensor::empty({c.m, c.n}, d, ga.device());
      SkinnyGemm gt{ga.raw_data(), gbt.raw_data(), got_t.raw_data(), c.m, c.n, c.k, c.k,
                    c.k + 8, c.n};
      gt.f16 = d == DType::f16;
      gt.w_t = true;
      ASSERT_EQ(cudaError_t(launch_skinny_gemm(gt, current_stream())), cudaSuccess) << what;
      expect_close(got_t, aten::mm(a, aten::t(hb)), 2e-2, what + " w transposed");
    }
  }
  // Through mm: 128 column blocks fill an H100 or H200 in one wave, so mm takes the kernel.
  for (int64_t m : {1, 7, 16}) {
    std::string what = fmt::format("mm {}x264x4096", m);
    Tensor a = random({m, 264}, DType::bf16, 22, -1, 1);
    Tensor b = random({264, 4096}, DType::bf16, 23, -1, 1);
    Tensor ga = to_device(a), gb = to_device(b);
    int sms = 0;
    ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
    const bool skinny = skinny_gemm_fits(
        {ga.raw_data(), gb.raw_data(), nullptr, m, 4096, 264, 264, 4096, 4096}, 16, sms);
    if (sms >= 128 && sms <= 256) {
      EXPECT_TRUE(skinny) << what << " on " << sms << " multiprocessors";
    }
    int64_t launched = skinny_gemm_launches();
    Tensor got = aten::mm(ga, gb);
    const bool h100_or_h200 = sms >= 128 && sms <= 256;  // one wave: the kernel, unsplit
    if (h100_or_h200) {
      EXPECT_EQ(skinny_gemm_launches(), launched + 1) << what << ": the kernel ran";
    }
    expect_close(got, aten::mm(a, b), 2e-2, what);
    expect_close(got, to_host(with_cublas_only([&] { return aten::mm(ga, gb); })), 1e-2,
                 what + " against cuBLAS");
    expect_close(aten::mm(ga, gb), to_host(got), 0, what + " run twice");  // deterministic
    // k and v of a TP2 decoder (512 columns): the kernel, k split over clusters of 8.
    Tensor kv = random({264, 512}, DType::bf16, 31, -1, 1);
    if (sms >= 128 && sms <= 256) {
      EXPECT_EQ(skinny_gemm_split({ga.raw_data(), kv.raw_data(), nullptr, m, 512, 264, 264, 512,
                                   512}, 16, sms), 8) << what;
    }
    Tensor gkv = to_device(kv);
    Tensor got_kv;
    {
      Tunables split_on = tunables();
      split_on.cuda_skinny_gemm_split = true;  // off by default (Note [skinny GEMM split])
      testing::ScopedTunables on(split_on);
      launched = skinny_gemm_launches();
      got_kv = aten::mm(ga, gkv);
      if (h100_or_h200) {
        EXPECT_EQ(skinny_gemm_launches(), launched + 1) << what << " x 512: split";
      }
      expect_close(got_kv, aten::mm(a, kv), 2e-2, what + " x 512 columns");
      expect_close(aten::mm(ga, gkv), to_host(got_kv), 0, what + " split: deterministic");
    }
    expect_close(aten::mm(ga, gkv), to_host(got_kv), 1e-2, what + " split against cuBLAS");
    // nn.Linear's layout: x @ w.t() with w [4096, 264] takes the kernel too (w_t).
    Tensor w = random({4096, 264}, DType::bf16, 30, -1, 1);
    Tensor gwt = aten::t(to_device(w));
    EXPECT_EQ(skinny_gemm_fits({ga.raw_data(), gwt.raw_data(), nullptr, m, 4096, 264, 264, 264,
                                4096, 1, 0, false, true}, 16, sms), skinny) << what;
    launched = skinny_gemm_launches();
    Tensor got_t = aten::mm(ga, gwt);
    if (h100_or_h200) {
      EXPECT_EQ(skinny_gemm_launches(), launched + 1) << what << " x @ w.t()";
    }
    expect_close(got_t, aten::mm(a, aten::t(w)), 2e-2, what + " x @ w.t()");
    expect_close(got_t, to_host(with_cublas_only([&] { return aten::mm(ga, gwt); })), 1e-2,
                 what + " x @ w.t() against cuBLAS");
  }
  // alpha and beta (addmm reads the output the bias was broadcast into).
  Tensor bias = random({4096}, DType::bf16, 24), m1 = random({4, 64}, DType::bf16, 25),
         m2 = random({64, 4096}, DType::bf16, 26);
  KwArgs ab{{"beta", 0.5}, {"alpha", 2.0}};
  expect_close(call("aten::addmm", {to_device(bias), to_device(m1), to_device(m2)}, ab).to_tensor(),
               call("aten::addmm", {bias, m1, m2}, ab).to_tensor(), 2e-2, "skinny addmm");
  // Shapes it does not take still reach cuBLAS: 17 rows, a weight view with an odd leading dim.
  Tensor tall = random({17, 64}, DType::bf16, 27), w = random({64, 4097}, DType::bf16, 28);
  Tensor gw = aten::slice(to_device(w), 1, 1, 4097), hw = aten::slice(w, 1, 1, 4097);
  expect_close(aten::mm(to_device(tall), gw), aten::mm(tall, hw), 2e-2, "17 rows, sliced weight");
  expect_close(aten::mm(to_device(m1), gw), aten::mm(m1, hw), 2e-2, "4 rows, sliced weight");
}

TEST_F(CudaOps, RmsNormAndSoftmaxMatchCpu) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    // Rows of up to 8192 elements stay in registers (Note [rms_norm rows]); 20000 re-reads.
    for (int64_t n : {1, 7, 1023, 4096, 4099, 8192, 20000}) {
      Tensor x = random({3, n}, d, 18), w = random({n}, d, 19);
      std::vector<Value> args{x, std::vector<int64_t>{n}, w, 1e-5};
      std::vector<Value> gargs{to_device(x), std::vector<int64_t>{n}, to_device(w), 1e-5};
      double tol = d == DType::f64 ? 1e-12 : d == DType::f32 ? 1e-5 : 2e-2;
      expect_close(call("aten::rms_norm", gargs).to_tensor(), call("aten::rms_norm", args).to_tensor(),
                   tol, fmt::format("rms_norm {} n={}", dtype_name(d), n));
      for (int64_t dim : {0, 1}) {
        expect_close(call("aten::_softmax", {to_device(x), dim, false}).to_tensor(),
                     call("aten::_softmax", {x, dim, false}).to_tensor(), tol,
                     fmt::format("softmax {} n={} dim={}", dtype_name(d), n, dim));
      }
    }
  }
}

TEST_F(CudaOps, SumMeanAndCatMatchCpu) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (int64_t n : {0, 1, 7, 1023}) {
      Tensor x = random({3, n, 5}, d, 21);
      // Every subset of dims, kept or not, and a strided (transposed) input.
      for (std::vector<int64_t> dims : std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1, 2}}) {
        for (bool keep : {false, true}) {
          for (const char* op : {"aten::sum.dim_IntList", "aten::mean.dim"}) {
            // One rounding of the result plus the float (double) sums of `count` elements of
            // at most 2 in another order, relative to max(1, |sum|).
            int64_t count = 1;
            for (int64_t k : dims) count *= x.shape()[size_t(k)];
            const double tol = d == DType::f64 ? 1e-12 + 2.3e-16 * 2 * double(count)
                               : d == DType::f32 ? 1e-6 + 1.2e-7 * 2 * double(count)
                                                 : 1e-2 + 1.2e-7 * 2 * double(count);
            expect_close(call(op, {to_device(x), dims, keep}).to_tensor(),
                         call(op, {x, dims, keep}).to_tensor(), tol,
                         fmt::format("{} {} n={} dims={} keepdim={}", op, dtype_name(d), n,
                                     fmt::join(dims, ","), keep));
          }
        }
      }
      Tensor t = call("aten::transpose.int", {x, int64_t(0), int64_t(2)}).to_tensor();
      for (const char* op : {"aten::sum.dim_IntList", "aten::mean.dim"}) {  // a transposed view
        expect_close(call(op, {call("aten::transpose.int", {to_device(x), int64_t(0), int64_t(2)}),
                               std::vector<int64_t>{0}, false}).to_tensor(),
                     call(op, {t, std::vector<int64_t>{0}, false}).to_tensor(),
                     d == DType::f64 ? 1e-12 : d == DType::f32 ? 1e-5 : 2e-2,
                     fmt::format("{} of a transposed {} over dim 0", op, dtype_name(d)));
      }
      Tensor gt = call("aten::transpose.int", {to_device(x), int64_t(0), int64_t(2)}).to_tensor();
      expect_close(call("aten::sum.dim_IntList", {gt, std::vector<int64_t>{1}, false}, {{"dtype", DType::f32}}).to_tensor(),
                   call("aten::sum.dim_IntList", {t, std::vector<int64_t>{1}, false}, {{"dtype", DType::f32}}).to_tensor(),
                   1e-6 + 2.4e-7 * double(n), fmt::format("sum of a transposed {} to f32", dtype_name(d)));
      Tensor y = random({2, n, 5}, d, 22), z = random({3, 4, 5}, d, 23);
      std::vector<Tensor> rows{x, y}, cols{x, z};
      std::vector<Tensor> grows{to_device(x), to_device(y)}, gcols{to_device(x), to_device(z)};
      expect_close(call("aten::cat", {grows, int64_t(0)}).to_tensor(),
                   call("aten::cat", {rows, int64_t(0)}).to_tensor(), 0,
                   fmt::format("cat dim 0 {} n={}", dtype_name(d), n));
      expect_close(call("aten::cat", {gcols, int64_t(1)}).to_tensor(),
                   call("aten::cat", {cols, int64_t(1)}).to_tensor(), 0,
                   fmt::format("cat dim 1 {} n={}", dtype_name(d), n));
    }
  }
}

// Note [column sums]: sums over adjacent dims of a contiguous tensor before a kept one (a norm's
// weight gradient: [B, S, H] over B and S; GQA's repeated heads) run in place, the rows split over
// blocks and the splits added in order:
// every element against the CPU's, with row counts around the splits' boundaries, columns not a
// multiple of the 32-column tile, size-1 dims between, integer results exact, and a mean.
TEST_F(CudaOps, ColumnSumsMatchCpu) {
  struct Case {
    std::vector<int64_t> shape, dims;
  };
  // GQA's repeated heads: [B, Hkv, n, S, D] over n (outer B * Hkv); a middle dim of 3 x 5 x 7.
  const std::vector<Case> cases{{{4, 512, 96}, {0, 1}},    {{2048, 33}, {0}},  {{31, 4097}, {0}},
                                {{5, 1, 3, 70}, {0, 2}},   {{1, 700, 64}, {1}}, {{4096, 1, 2}, {0}},
                                {{2, 8, 4, 16, 8}, {2}},   {{3, 5, 7}, {1}},    {{3, 400, 65}, {1}}};
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (const Case& c : cases) {
      Tensor x = random(c.shape, d, 31);
      int64_t count = 1;
      for (int64_t k : c.dims) count *= c.shape[size_t(k)];
      const double tol = d == DType::f64 ? 1e-12 + 2.3e-16 * 2 * double(count)
                         : d == DType::f32 ? 1e-6 + 1.2e-7 * 2 * double(count)
                                           : 1e-2 + 1.2e-7 * 2 * double(count);
      for (bool keep : {false, true}) {
        for (const char* op : {"aten::sum.dim_IntList", "aten::mean.dim"}) {
          expect_close(call(op, {to_device(x), c.dims, keep}).to_tensor(),
                       call(op, {x, c.dims, keep}).to_tensor(), tol,
                       fmt::format("{} {} [{}] over {} keepdim={}", op, dtype_name(d),
                                   fmt::join(c.shape, ","), fmt::join(c.dims, ","), keep));
        }
      }
    }
  }
  Tensor ints = random({3000, 40}, DType::i32, 32, -1000, 1000);
  expect_close(call("aten::sum.dim_IntList", {to_device(ints), std::vector<int64_t>{0}, false}).to_tensor(),
               call("aten::sum.dim_IntList", {ints, std::vector<int64_t>{0}, false}).to_tensor(), 0,
               "integer column sums are exact");
}

TEST_F(CudaOps, AllocationDuringCaptureIsRefused) {
  Tensor x = to_device(random({16}, DType::f32, 20));
  auto stream = static_cast<cudaStream_t>(current_stream());
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  std::string message;
  try {
    call("aten::sin", {x});  // a fresh output would be allocated inside the capture
  } catch (const Error& e) {
    message = e.what();
  }
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(stream, &g);
  if (g) cudaGraphDestroy(g);
  cudaGetLastError();
  EXPECT_NE(message.find("allocating GPU memory would allocate or rendezvous while the stream is "
                         "being captured"),
            std::string::npos)
      << message;
}

// Note [scratch inside a capture]: inside a CaptureScratch scope a kernel's scratch becomes the
// graph's allocation and free nodes; the graph replays with the same results, and the scope counts
// what is still alive.
TEST_F(CudaOps, ScratchInsideACaptureScopeIsCapturedAndFreed) {
  Tensor x = to_device(random({64}, DType::f32, 21));
  Tensor out = call("aten::cos", {x}).to_tensor();  // allocated before the capture
  auto stream = static_cast<cudaStream_t>(current_stream());
  cudaGraph_t g = nullptr;
  {
    CaptureScratch scratch;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    {
      Tensor s = call("aten::sin", {x}).to_tensor();  // scratch: allocated inside the capture
      EXPECT_EQ(scratch.live(), 1);
      aten::copy_(out, s);
    }
    EXPECT_EQ(scratch.live(), 0);
    ASSERT_EQ(cudaStreamEndCapture(stream, &g), cudaSuccess);
  }
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  cudaGraphDestroy(g);
  for (int i = 0; i < 2; ++i) {  // a graph whose allocation had escaped would refuse the second
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  cudaGraphExecDestroy(exec);
  expect_close(out, call("aten::sin", {to_host(x)}).to_tensor(), 2e-6, "sin through captured scratch");
}

}  // namespace
}  // namespace symmflow::cuda
