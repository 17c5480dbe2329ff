// The cuda kernels of the MoE routing ops (kernels/cuda/aten_moe.cpp, moe.cu, elementwise.cu's
// div modes) against the cpu kernels on the same inputs: topk, sort and sort.stable element for
// element (ties, NaN, every dtype, every dim, lines on both sides of the shared-memory limit, the
// scratch path of topk), div.Tensor_mode / div.Scalar_mode exactly (every dtype pair, broadcast,
// strided), histc exactly (every float dtype and i32 / i64, ranges given and from data, more bins than one
// shared-memory pass), _grouped_mm within rounding (empty groups, a zero tail, i32/i64 offs, a
// transposed mat2), plus the GPU's documented differences (integer division by zero gives 0,
// histc of NaN data gives zeros). Skipped without a GPU.
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/tensors.hpp"

#include "symmflow/core/error.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/ops/registry.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

class CudaMoeOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no GPU";
    bind_device();
  }
};

// Small multiples of 1/4 (ties are common), NaN and -0.0 planted in float tensors.
Tensor input(const Shape& shape, DType dtype, int seed) {
  Tensor t = symmflow::testing::make_input(shape, dtype, 0, seed);
  if (is_floating(dtype)) {
    for (int64_t i = 0; i < t.numel(); i += 7) store_double(t.view(), i, i % 14 ? -0.0 : NAN);
  }
  return t;
}

void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  std::vector<double> a = got.to_doubles(), b = want.to_doubles();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    ASSERT_EQ(a[i], b[i]) << what << " element " << i;
    ASSERT_EQ(std::signbit(a[i]), std::signbit(b[i])) << what << " sign of element " << i;
  }
}

std::vector<Value> on_gpu(const std::vector<Value>& args) {
  std::vector<Value> gpu;
  for (const Value& v : args) gpu.push_back(v.is_tensor() ? Value(to_device(v.to_tensor())) : v);
  return gpu;
}

// Every result of `op` on the GPU equals the cpu's.
void expect_gpu_equals_cpu(const std::string& op, const std::vector<Value>& args,
                           const KwArgs& kw, const std::string& what) {
  Value want = call(op, args, kw), got = call(op, on_gpu(args), kw);
  if (want.is_tensor()) return expect_equal(to_host(got.to_tensor()), want.to_tensor(), what);
  const std::vector<Tensor>& w = want.to_tensor_list();
  const std::vector<Tensor>& g = got.to_tensor_list();
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t i = 0; i < w.size(); ++i) {
    expect_equal(to_host(g[i]), w[i], fmt::format("{} result {}", what, i));
  }
}

const DType kSortable[] = {DType::f32, DType::bf16, DType::f16, DType::f64,
                           DType::i8,  DType::i32,  DType::i64, DType::u32};

TEST_F(CudaMoeOps, TopkEqualsCpu) {
  int seed = 1;
  for (DType dtype : kSortable) {
    Tensor x = input({3, 5, 7}, dtype, seed++);
    for (int64_t dim : {0, 1, 2}) {
      for (int64_t k : {int64_t(0), int64_t(1), int64_t(3), x.size(dim)}) {
        for (bool largest : {true, false}) {
          expect_gpu_equals_cpu("aten::topk", {x, k, dim, largest}, {},
                                fmt::format("topk {} dim {} k {} largest {}", dtype_name(dtype),
                                            dim, k, largest));
        }
      }
    }
  }
  // Router-shaped: [tokens, experts] top 2 of 8 and top 8 of 128; a strided view.
  expect_gpu_equals_cpu("aten::topk", {input({1000, 8}, DType::bf16, 50), int64_t(2)}, {}, "router 2/8");
  expect_gpu_equals_cpu("aten::topk", {input({300, 128}, DType::f32, 51), int64_t(8)}, {}, "router 8/128");
  Tensor wide = input({6, 40}, DType::f32, 52).as_strided({6, 13}, {40, 3}, 1);
  expect_gpu_equals_cpu("aten::topk", {wide, int64_t(4)}, {}, "strided");
  // Lines on both sides of kSortSharedMax (2048), and the scratch path (k < n, n > 2048).
  for (int64_t n : {2047, 2048, 2049, 5000}) {
    for (int64_t k : {int64_t(1), int64_t(17), n}) {
      expect_gpu_equals_cpu("aten::topk", {input({3, n}, DType::f32, int(n)), k}, {},
                            fmt::format("topk n {} k {}", n, k));
    }
  }
  expect_gpu_equals_cpu("aten::topk", {Tensor::full({}, DType::f32, 5), int64_t(0)}, {}, "0-dim");
  expect_gpu_equals_cpu("aten::topk", {Tensor::empty({0, 4}, DType::f32), int64_t(2)}, {}, "empty");
}

TEST_F(CudaMoeOps, SortEqualsCpu) {
  int seed = 100;
  for (DType dtype : kSortable) {
    for (const Shape& shape : {Shape{4, 33}, Shape{1, 1}, Shape{0, 3}, Shape{130, 2}}) {
      Tensor x = input(shape, dtype, seed++);
      for (int64_t dim : {0, 1}) {
        for (bool desc : {false, true}) {
          std::string what = fmt::format("sort {} {} dim {} desc {}", dtype_name(dtype),
                                         shape_str(shape), dim, desc);
          expect_gpu_equals_cpu("aten::sort", {x, dim, desc}, {}, what);
          expect_gpu_equals_cpu("aten::sort.stable", {x},
                                {{"stable", true}, {"dim", dim}, {"descending", desc}}, what);
        }
      }
    }
  }
  Tensor b = symmflow::testing::make_input({5, 9}, DType::boolean, 0, 3);
  expect_gpu_equals_cpu("aten::sort", {b, int64_t(1), true}, {}, "sort bool");
  // Expert ids with many ties, long lines (the global network), and along a middle dim.
  for (int64_t n : {2048, 2049, 3000, 70000}) {
    Tensor ids = symmflow::testing::random_tensor({n}, DType::i64, uint64_t(n));
    expect_gpu_equals_cpu("aten::sort", {ids}, {}, fmt::format("sort ids n {}", n));
    expect_gpu_equals_cpu("aten::sort", {input({2, n}, DType::bf16, int(n)), int64_t(1), true},
                          {}, fmt::format("sort bf16 n {}", n));
  }
  expect_gpu_equals_cpu("aten::sort", {input({3, 2500, 2}, DType::f32, 9), int64_t(1)}, {},
                        "sort middle dim, global");
}

TEST_F(CudaMoeOps, DivModesEqualCpu) {
  const DType kAll[] = {DType::f32, DType::bf16, DType::f16, DType::f64,
                        DType::i8,  DType::i32,  DType::i64, DType::u32};
  int seed = 200;
  for (DType a : kAll) {
    for (DType b : {DType::f32, DType::i64, DType::bf16, a}) {
      Tensor x = symmflow::testing::random_tensor({3, 1, 7}, a, uint64_t(seed++), -20, 20);
      Tensor y = symmflow::testing::random_tensor({4, 7}, b, uint64_t(seed++), -6, 6);
      std::vector<double> yv = y.to_doubles();
      for (size_t i = 0; i < yv.size(); ++i) {
        if (yv[i] == 0) store_double(y.view(), int64_t(i), 3);  // the cpu raises on integer / 0
      }
      for (const char* mode : {"floor", "trunc", ""}) {
        Value rm = *mode ? Value(std::string(mode)) : Value();
        std::string what = fmt::format("div {} {} '{}'", dtype_name(a), dtype_name(b), mode);
        expect_gpu_equals_cpu("aten::div.Tensor_mode", {x, y}, {{"rounding_mode", rm}}, what);
        expect_gpu_equals_cpu("aten::div.Tensor_mode", {x.as_strided({3, 4}, {7, 2}, 0), y.as_strided({4}, {1}, 0)},
                              {{"rounding_mode", rm}}, what + " strided");
        for (Value s : {Value(int64_t(-3)), Value(2.5), Value(0.3)}) {
          expect_gpu_equals_cpu("aten::div.Scalar_mode", {x, s}, {{"rounding_mode", rm}},
                                fmt::format("{} by {}", what, s.str()));
        }
      }
    }
  }
  // Float division by zero as IEEE; an integer one gives 0 on the GPU (the cpu raises).
  Tensor z = symmflow::testing::random_tensor({9}, DType::f32, 3);
  expect_gpu_equals_cpu("aten::div.Scalar_mode", {z, 0.0}, {{"rounding_mode", std::string("floor")}}, "float / 0");
  Tensor i = symmflow::testing::random_tensor({9}, DType::i32, 4);
  Tensor got = to_host(call("aten::div.Scalar_mode", {to_device(i), int64_t(0)},
                            {{"rounding_mode", std::string("floor")}}).to_tensor());
  for (double v : got.to_doubles()) EXPECT_EQ(v, 0);
}

TEST_F(CudaMoeOps, HistcEqualsCpu) {
  int seed = 300;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    Tensor x = symmflow::testing::random_tensor({37, 29}, dtype, uint64_t(seed++), -3, 3);
    const std::string d(dtype_name(dtype));
    for (int64_t bins : {1, 8, 100, 10000}) {
      expect_gpu_equals_cpu("aten::histc", {x, bins, int64_t(-2), int64_t(2)}, {}, fmt::format("histc {} {} [-2, 2]", d, bins));
      expect_gpu_equals_cpu("aten::histc", {x, bins, int64_t(0), int64_t(0)}, {}, fmt::format("histc {} {} data range", d, bins));
      expect_gpu_equals_cpu("aten::histc", {x, bins, 0.1, 0.7}, {}, fmt::format("histc {} {} [0.1, 0.7]", d, bins));
    }
    Tensor ids = symmflow::testing::make_input({4000}, DType::i64, 0, seed++);  // expert ids
    Tensor f = call("aten::_to_copy", {ids}, {{"dtype", dtype}}).to_tensor();
    expect_gpu_equals_cpu("aten::histc", {f, int64_t(8), int64_t(0), int64_t(7)}, {}, "expert counts " + d);
    expect_gpu_equals_cpu("aten::histc", {Tensor::full({5}, dtype, 2), int64_t(4), int64_t(0), int64_t(0)}, {}, "one value " + d);
    expect_gpu_equals_cpu("aten::histc", {Tensor::empty({0}, dtype), int64_t(4), int64_t(0), int64_t(0)}, {}, "empty " + d);
    expect_gpu_equals_cpu("aten::histc", {input({50}, dtype, seed++), int64_t(6), int64_t(-1), int64_t(1)}, {}, "NaN ignored " + d);
    expect_gpu_equals_cpu("aten::histc", {x.as_strided({10, 10}, {29, 2}, 3), int64_t(9), int64_t(-1), int64_t(1)}, {}, "strided " + d);
  }
  // Note [integer histc]: transformers' MoE layers count int32 expert ids on GPUs.
  for (DType dtype : {DType::i32, DType::i64}) {
    const std::string d(dtype_name(dtype));
    Tensor ids = symmflow::testing::make_input({4000}, DType::i64, 0, seed++);
    Tensor t = call("aten::_to_copy", {ids}, {{"dtype", dtype}}).to_tensor();
    for (int64_t bins : {1, 3, 8, 10000}) {
      expect_gpu_equals_cpu("aten::histc", {t, bins, int64_t(0), int64_t(7)}, {}, fmt::format("histc {} {} [0, 7]", d, bins));
      expect_gpu_equals_cpu("aten::histc", {t, bins, int64_t(0), int64_t(0)}, {}, fmt::format("histc {} {} data range", d, bins));
      expect_gpu_equals_cpu("aten::histc", {t, bins, -0.5, 2.5}, {}, fmt::format("histc {} {} [-0.5, 2.5]", d, bins));
    }
    expect_gpu_equals_cpu("aten::histc", {Tensor::full({5}, dtype, 2), int64_t(4), int64_t(0), int64_t(0)}, {}, "one value " + d);
    expect_gpu_equals_cpu("aten::histc", {t.as_strided({10, 10}, {29, 2}, 3), int64_t(9), int64_t(-1), int64_t(1)}, {}, "strided " + d);
  }
  // A range from data with NaN: zero counts on the GPU (the cpu raises "not finite").
  Tensor nan = input({20}, DType::f32, 9);
  Tensor got = to_host(call("aten::histc", {to_device(nan), int64_t(4), int64_t(0), int64_t(0)}).to_tensor());
  for (double v : got.to_doubles()) EXPECT_EQ(v, 0);
}

TEST_F(CudaMoeOps, GroupedMmMatchesCpu) {
  const int64_t S = 37, K = 24, N = 19, G = 4;
  const std::vector<std::vector<int64_t>> cases = {{5, 5, 20, 30}, {0, 0, 0, 37}, {10, 20, 30, 37}, {0, 0, 0, 0}};
  int seed = 400;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (DType offs_dtype : {DType::i32, DType::i64}) {
      for (bool transposed : {false, true}) {
        for (const std::vector<int64_t>& ends : cases) {
          Tensor a = symmflow::testing::random_tensor({S, K}, dtype, uint64_t(seed++));
          Tensor b = symmflow::testing::random_tensor({G, K, N}, dtype, uint64_t(seed++));
          Tensor bd = to_device(b);
          if (transposed) {  // mat2 as a transposed view of a [G, N, K] tensor on the GPU
            Tensor bt = to_device(call("aten::transpose.int", {b, int64_t(1), int64_t(2)}).to_tensor());
            Tensor c = aten::clone(bt);
            bd = call("aten::transpose.int", {c, int64_t(1), int64_t(2)}).to_tensor();
          }
          Tensor offs = Tensor::empty({G}, offs_dtype);
          for (int64_t g = 0; g < G; ++g) store_double(offs.view(), g, double(ends[size_t(g)]));
          std::string what = fmt::format("_grouped_mm {} offs {} transposed {} ends {}", dtype_name(dtype),
                                         dtype_name(offs_dtype), transposed, fmt::join(ends, ","));
          Tensor want = call("aten::_grouped_mm", {a, b, offs}).to_tensor();
          Tensor got = to_host(call("aten::_grouped_mm", {to_device(a), bd, to_device(offs)}).to_tensor());
          ASSERT_EQ(got.dtype(), dtype) << what;
          ASSERT_EQ(got.shape(), want.shape()) << what;
          std::vector<double> g = got.to_doubles(), w = want.to_doubles();
          const double tol = dtype == DType::f32 ? 1e-4 : 3e-2;
          for (size_t i = 0; i < w.size(); ++i) {
            ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << what << " element " << i;
            if (int64_t(i) / N >= ends.back()) {
              ASSERT_EQ(g[i], 0) << what << ": tail row";
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace symmflow::cuda
