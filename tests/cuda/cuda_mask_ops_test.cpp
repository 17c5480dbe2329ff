// The cuda kernels of the mask, comparison, bitwise, indexing and scan ops (kernels/cuda/
// aten_logic.cpp, elementwise.cu) against the cpu kernels on the same inputs, element for element:
// eq/ne/lt/le/gt/ge (.Tensor, .Scalar with -inf/inf/NaN), bitwise_and/or/xor/not, logical_and/or/
// not, where.self, any.dim, arange.start_step, full_like, scalar_tensor, lift_fresh_copy,
// index.Tensor (the transformers mask pattern), index_select, gather and cumsum; broadcasting,
// strided views, every dtype, awkward sizes (0, 1, 7, 1023). Skipped without a GPU.
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

class CudaMaskOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no GPU";
    bind_device();
  }
};

// Small multiples of 1/4 (equal pairs are common), NaN and +-inf planted in float tensors.
Tensor input(const Shape& shape, DType dtype, int seed) {
  Tensor t = symmflow::testing::make_input(shape, dtype, 0, seed);
  if (is_floating(dtype) && t.numel() > 3) {
    store_double(t.view(), 0, NAN);
    store_double(t.view(), 1, INFINITY);
    store_double(t.view(), 2, -INFINITY);
  }
  return t;
}

// Equal dtype, shape and elements (NaN equals NaN).
void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  std::vector<double> a = got.to_doubles(), b = want.to_doubles();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    ASSERT_EQ(a[i], b[i]) << what << " element " << i;
  }
}

// Runs `op` on the host arguments and on their GPU copies; the results must be equal.
void expect_gpu_equals_cpu(const std::string& op, const std::vector<Value>& args,
                           const KwArgs& kw = {}) {
  std::vector<Value> gpu;
  for (const Value& v : args) {
    if (v.is_tensor()) {
      gpu.push_back(to_device(v.to_tensor()));
    } else if (v.is_tensor_list()) {
      std::vector<Tensor> l;
      for (const Tensor& t : v.to_tensor_list()) l.push_back(t.defined() ? to_device(t) : Tensor());
      gpu.push_back(l);
    } else {
      gpu.push_back(v);
    }
  }
  Tensor want = call(op, args, kw).to_tensor();
  Tensor got = to_host(call(op, gpu, kw).to_tensor());
  expect_equal(got, want, op);
}

const DType kAll[] = {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i8,
                      DType::i32, DType::i64,  DType::u32, DType::boolean};

TEST_F(CudaMaskOps, ComparisonsEqualCpu) {
  int seed = 1;
  for (DType a : kAll) {
    for (DType b : {DType::f32, DType::i64, DType::boolean, DType::bf16}) {
      for (int64_t n : {0, 1, 7, 1023}) {
        Tensor x = input({3, 1, n}, a, seed++), y = input({5, n}, b, seed++);
        for (const char* cmp : {"eq", "ne", "lt", "le", "gt", "ge"}) {
          expect_gpu_equals_cpu(fmt::format("aten::{}.Tensor", cmp), {x, y});
        }
      }
    }
    Tensor x = input({4, 9}, a, seed++).as_strided({4, 4}, {9, 2}, 1);
    for (Value s : {Value(int64_t(0)), Value(0.25), Value(-INFINITY), Value(INFINITY), Value(NAN),
                    Value(true)}) {
      for (const char* cmp : {"eq", "ne", "lt", "le", "gt", "ge"}) {
        expect_gpu_equals_cpu(fmt::format("aten::{}.Scalar", cmp), {x, s});
      }
    }
  }
}

TEST_F(CudaMaskOps, BitwiseAndLogicalEqualCpu) {
  int seed = 100;
  for (DType a : {DType::boolean, DType::i8, DType::i32, DType::i64, DType::u32}) {
    Tensor x = input({2, 1, 1023}, a, seed++), y = input({3, 1023}, a, seed++);
    for (const char* op : {"bitwise_and", "bitwise_or", "bitwise_xor"}) {
      expect_gpu_equals_cpu(fmt::format("aten::{}.Tensor", op), {x, y});
    }
    expect_gpu_equals_cpu("aten::bitwise_and.Scalar", {x, int64_t(3)});
    expect_gpu_equals_cpu("aten::bitwise_or.Scalar", {x, true});
    expect_gpu_equals_cpu("aten::bitwise_not", {x});
  }
  for (DType a : kAll) {
    Tensor x = input({7, 1}, a, seed++), y = input({1, 1023}, DType::f32, seed++);
    expect_gpu_equals_cpu("aten::logical_and", {x, y});
    expect_gpu_equals_cpu("aten::logical_or", {x, y});
    expect_gpu_equals_cpu("aten::logical_not", {x});
  }
  Tensor f = to_device(input({3}, DType::f32, 1));
  try {
    call("aten::bitwise_and.Tensor", {f, f});
    ADD_FAILURE() << "bitwise_and of floats ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("aten::bitwise_and.Tensor: self has dtype f32, which is "
                                         "not supported (expected bool or an integer dtype)"),
              std::string::npos) << e.what();
  }
}

TEST_F(CudaMaskOps, MaskOpsEqualCpu) {
  int seed = 200;
  for (DType a : kAll) {
    Tensor cond = input({5, 1, 7}, DType::boolean, seed++);
    Tensor x = input({3, 7}, a, seed++), y = input({1}, DType::f32, seed++);
    expect_gpu_equals_cpu("aten::where.self", {cond, x, y});
    expect_gpu_equals_cpu("aten::where.self", {cond, x, Tensor::full({}, DType::f64, -INFINITY)});
    Tensor big = input({4, 6, 1023}, a, seed++);
    for (int64_t dim : {0, 1, -1}) {
      expect_gpu_equals_cpu("aten::any.dim", {big, dim});
      expect_gpu_equals_cpu("aten::any.dim", {big, dim, true});
    }
    expect_gpu_equals_cpu("aten::full_like", {x, -INFINITY}, {{"dtype", DType::f32}});
    expect_gpu_equals_cpu("aten::full_like", {x, int64_t(3)});
    expect_gpu_equals_cpu("aten::lift_fresh_copy", {x});
  }
  // Factories without a tensor argument run where their preset output lives.
  for (DType dtype : {DType::i64, DType::f32, DType::bf16}) {
    for (std::vector<Value> args : {std::vector<Value>{int64_t(0), int64_t(1023)},
                                    std::vector<Value>{int64_t(5), int64_t(-7), int64_t(-3)},
                                    std::vector<Value>{0.5, int64_t(9), 0.25}}) {
      const OpDef& op = Registry::global().get("aten::arange.start_step");
      std::vector<Value> bound = bind_args(op, args, {{"dtype", dtype}});
      Tensor want = call_bound(op, bound)[0].to_tensor();
      std::vector<Value> outputs = {Tensor::empty(want.shape(), dtype, Device::cuda(0))};
      call_bound_into(op, bound, outputs);
      expect_equal(to_host(outputs[0].to_tensor()), want, "arange");
    }
  }
}

TEST_F(CudaMaskOps, IndexingAndCumsumEqualCpu) {
  int seed = 300;
  for (DType a : kAll) {
    Tensor mask = input({3, 1023}, a, seed++);
    Tensor batch = Tensor::from_vector<int64_t>({2, 0}, {2, 1, 1, 1});
    Tensor kv = Tensor::from_vector<int64_t>({0, 3, 1022, -1, 5, 7, 1}, {1, 1, 1, 7});
    expect_gpu_equals_cpu("aten::index.Tensor", {mask, std::vector<Tensor>{batch, kv}});
    Tensor x = input({4, 5, 6}, a, seed++);
    Tensor i32 = Tensor::from_vector<int32_t>({4, -2, 0}, {3});
    Tensor i0 = Tensor::from_vector<int64_t>({3, 1}, {2, 1});
    Tensor i2 = Tensor::from_vector<int64_t>({5, 0, -1}, {3});
    expect_gpu_equals_cpu("aten::index.Tensor", {x, std::vector<Tensor>{Tensor(), i32}});
    expect_gpu_equals_cpu("aten::index.Tensor", {x, std::vector<Tensor>{i0, Tensor(), i2}});
    expect_gpu_equals_cpu("aten::index_select", {x, int64_t(1), i32});
    expect_gpu_equals_cpu("aten::index_select", {x, int64_t(-1), i2});
    Tensor gi = Tensor::from_vector<int64_t>({0, 4, -1, 2, 1, 3}, {1, 2, 3});
    expect_gpu_equals_cpu("aten::gather", {x, int64_t(1), gi});
    for (int64_t dim : {0, 1, 2}) expect_gpu_equals_cpu("aten::cumsum", {x, dim});
    expect_gpu_equals_cpu("aten::cumsum", {input({7, 1023}, a, seed++), int64_t(1)});
  }
}

}  // namespace
}  // namespace symmflow::cuda
