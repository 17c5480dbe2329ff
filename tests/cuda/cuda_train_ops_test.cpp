// The cuda kernels of the ops that training graphs add (ops/aten/meta_scatter.hpp, _log_softmax)
// against the cpu kernels on the same inputs, element for element: squeeze.dims (a view of the GPU
// tensor), constant_pad_nd and slice_scatter (composed of full.out and copy_), scatter.value (the
// gather/scatter launch; i32 and i64 index, repeated indices, empty index) exactly, and
// _log_softmax (rows and columns, half_to_float) within float tolerance, clamp and rsub.Scalar;
// every dtype they take, strided views, awkward sizes (0, 1, 7, 1023). And the collective
// matmuls of sequence parallelism (decompose_collective_matmul's ops, copy stream and peer-writing
// GEMMs) in a compiled plan at 2, 3 and 4 ranks, one GPU each (the rank counts the host has GPUs
// for), captured and replayed, against the interpreter of the graph as written. Skipped without a
// GPU.
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/graphs.hpp"
#include "support/scoped_tunables.hpp"
#include "support/tensors.hpp"

#include "symmflow/core/error.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/interpret.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

class CudaTrainOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no GPU";
    bind_device();
  }
};

const DType kAll[] = {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i8,
                      DType::i32, DType::i64,  DType::u32, DType::boolean};

Tensor input(const Shape& shape, DType dtype, int seed) {
  return symmflow::testing::make_input(shape, dtype, 0, seed);
}

// Within `tol` relative to max(1, |want|) (0: equal; NaN equals NaN).
void expect_close(const Tensor& got_gpu, const Tensor& want, double tol, const std::string& what) {
  Tensor got = to_host(got_gpu);
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  std::vector<double> a = got.to_doubles(), b = want.to_doubles();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    ASSERT_LE(std::abs(a[i] - b[i]), tol * std::max(1.0, std::abs(b[i]))) << what << " element " << i;
  }
}

// `t` on the GPU with the same strides (a strided host view becomes a strided GPU view).
Tensor gpu_like(const Tensor& t) {
  if (t.is_contiguous()) return to_device(t);
  // The host view's storage span, copied whole, then viewed the same way.
  int64_t span = 1;
  for (size_t d = 0; d < t.shape().size(); ++d) span += (t.shape()[d] - 1) * t.strides()[d];
  Tensor base = t.as_strided({t.numel() == 0 ? 0 : span}, {1}, 0);
  return to_device(base.contiguous()).as_strided(t.shape(), t.strides(), 0);
}

// A view of a larger tensor: every other element of the last dim.
Tensor strided(const Shape& shape, DType dtype, int seed) {
  Shape wide = shape;
  wide.back() *= 2;
  Tensor w = input(wide, dtype, seed);
  Strides s = contiguous_strides(wide);
  s.back() = 2;
  return w.as_strided(shape, s, 0);
}

Tensor index_tensor(const Shape& shape, int64_t bound, DType dt, int seed) {
  Tensor t = Tensor::empty(shape, dt);
  uint64_t x = uint64_t(seed) * 2654435761u + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    store_double(t.view(), i, double(x % uint64_t(bound)));
  }
  return t;
}

TEST_F(CudaTrainOps, SqueezeDimsIsAView) {
  Tensor x = to_device(input({1, 7, 1, 3}, DType::f32, 1));
  Tensor y = call("aten::squeeze.dims", {x, std::vector<int64_t>{0, -2}}).to_tensor();
  EXPECT_EQ(y.shape(), (Shape{7, 3}));
  EXPECT_EQ(y.raw_data(), x.raw_data());
  EXPECT_EQ(y.device().type, DeviceType::cuda);
}

TEST_F(CudaTrainOps, ConstantPadNdEqualsCpu) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{2, 7}, {0, 1}},      {{3, 1023}, {1, 2}},     {{3, 5}, {-1, 2, 1, 0}},
      {{3, 5}, {-2, -3}},    {{2, 3, 4}, {0, 0, -1, 2, 1, 0}}, {{0, 5}, {1, 1}},
      {{1}, {-1, 7}}};
  int seed = 1;
  for (const auto& [shape, pad] : cases) {
    for (DType d : kAll) {
      for (bool view : {false, true}) {
        Tensor x = view ? strided(shape, d, seed++) : input(shape, d, seed++);
        Value v = is_floating(d) ? Value(-0.5) : Value(int64_t(d == DType::boolean ? 1 : 3));
        Tensor want = call("aten::constant_pad_nd", {x, pad, v}).to_tensor();
        Tensor got = call("aten::constant_pad_nd", {gpu_like(x), pad, v}).to_tensor();
        expect_close(got, want, 0,
                     fmt::format("pad {} by {} {}{}", shape_str(shape), shape_str(pad),
                                 dtype_name(d), view ? " strided" : ""));
      }
    }
  }
}

TEST_F(CudaTrainOps, SliceScatterEqualsCpu) {
  struct Case {
    Shape shape;
    int64_t dim;
    Value start, end;
    int64_t step;
  };
  const Case cases[] = {{{5, 7}, 1, int64_t(1), int64_t(6), 2},
                        {{4, 1023}, -1, int64_t(-511), Value(), 1},
                        {{2, 3, 8}, 2, int64_t(0), int64_t(100), 3},
                        {{4, 6}, 0, int64_t(2), int64_t(2), 1},
                        {{0, 6}, 1, int64_t(1), int64_t(4), 1}};
  int seed = 1;
  for (const Case& c : cases) {
    for (DType d : kAll) {
      Tensor x = strided(c.shape, d, seed++);
      Tensor slice = call("aten::slice.Tensor", {x, c.dim, c.start, c.end, c.step}).to_tensor();
      Tensor src = input(slice.shape(), d, seed++);
      std::vector<Value> args{x, src, c.dim, c.start, c.end, c.step};
      std::vector<Value> gargs{gpu_like(x), to_device(src), c.dim, c.start, c.end, c.step};
      expect_close(call("aten::slice_scatter", gargs).to_tensor(),
                   call("aten::slice_scatter", args).to_tensor(), 0,
                   fmt::format("slice_scatter {} dim {} {}", shape_str(c.shape), c.dim,
                               dtype_name(d)));
    }
  }
}

TEST_F(CudaTrainOps, ScatterValueEqualsCpu) {
  const Shape self_shape = {4, 3, 7};
  int seed = 1;
  for (int64_t dim : {0, 1, 2, -1}) {
    const int64_t dd = dim < 0 ? dim + 3 : dim;
    Shape ishape = {3, 2, 5};
    ishape[size_t(dd)] = self_shape[size_t(dd)] + 2;  // larger along dim: repeated indices
    for (DType d : kAll) {
      for (DType it : {DType::i64, DType::i32}) {
        Tensor x = strided(self_shape, d, seed++);
        Tensor index = index_tensor(ishape, self_shape[size_t(dd)], it, seed++);
        Value v = is_floating(d) ? Value(-0.25) : Value(int64_t(d == DType::boolean ? 1 : 5));
        expect_close(call("aten::scatter.value", {gpu_like(x), dim, to_device(index), v}).to_tensor(),
                     call("aten::scatter.value", {x, dim, index, v}).to_tensor(), 0,
                     fmt::format("scatter dim {} {} index {}", dim, dtype_name(d), dtype_name(it)));
      }
    }
  }
  // nll_loss's backward (one-hot rows over a 1023-wide vocabulary) and an empty index.
  Tensor z = Tensor::zeros({5, 1023}, DType::f32);
  Tensor target = index_tensor({5, 1}, 1023, DType::i64, 3);
  expect_close(call("aten::scatter.value", {to_device(z), int64_t(1), to_device(target), -1.0})
                   .to_tensor(),
               call("aten::scatter.value", {z, int64_t(1), target, -1.0}).to_tensor(), 0, "one-hot");
  Tensor empty = Tensor::empty({5, 0}, DType::i64);
  expect_close(call("aten::scatter.value", {to_device(z), int64_t(1), to_device(empty), 1.0})
                   .to_tensor(),
               z, 0, "empty index");
}

TEST_F(CudaTrainOps, LogSoftmaxMatchesCpu) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    const double tol = d == DType::f64 ? 1e-12 : d == DType::f32 ? 1e-5 : 2e-2;
    for (int64_t n : {1, 7, 1023}) {
      Tensor x = symmflow::testing::random_tensor({3, n, 2}, d, uint64_t(n) + 7, -4, 4);
      for (int64_t dim : {0, 1, 2}) {
        const std::string what = fmt::format("log_softmax {} n={} dim={}", dtype_name(d), n, dim);
        expect_close(call("aten::_log_softmax", {to_device(x), dim, false}).to_tensor(),
                     call("aten::_log_softmax", {x, dim, false}).to_tensor(), tol, what);
        if (d == DType::bf16 || d == DType::f16) {
          expect_close(call("aten::_log_softmax", {to_device(x), dim, true}).to_tensor(),
                       call("aten::_log_softmax", {x, dim, true}).to_tensor(), 1e-5,
                       what + " half_to_float");
        }
      }
    }
  }
}

TEST_F(CudaTrainOps, ClampAndRsubMatchCpu) {
  int seed = 1;
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i64, DType::i32,
                  DType::i8}) {
    Tensor x = strided({5, 1023}, d, seed++);
    if (is_floating(d)) store_double(x.view(), 0, NAN);
    const std::vector<std::pair<Value, Value>> bounds = {
        {int64_t(-1), int64_t(1)}, {Value(), int64_t(0)}, {int64_t(-3), Value()},
        {int64_t(2), int64_t(-2)}};
    for (const auto& [lo, hi] : bounds) {
      expect_close(call("aten::clamp", {gpu_like(x), lo, hi}).to_tensor(),
                   call("aten::clamp", {x, lo, hi}).to_tensor(), 0,
                   fmt::format("clamp {}", dtype_name(d)));
    }
    for (int64_t alpha : {1, 3}) {
      Value other = is_floating(d) ? Value(0.75) : Value(int64_t(7));
      // alpha 1 exact; alpha 3 a multiply then an add on both, in float for 16-bit floats.
      const double tol = alpha == 1 || !is_floating(d) ? 0
                         : d == DType::f64                ? 1e-15
                         : d == DType::f32                ? 1e-6
                                                          : 1e-2;
      expect_close(call("aten::rsub.Scalar", {gpu_like(x), other, alpha}).to_tensor(),
                   call("aten::rsub.Scalar", {x, other, alpha}).to_tensor(), tol,
                   fmt::format("rsub {} alpha {}", dtype_name(d), alpha));
    }
  }
  Tensor ids = input({4, 9}, DType::i64, 3);  // small multiples of 1/4, as integers
  expect_close(call("aten::clamp", {to_device(ids), int64_t(-1), 2.5}).to_tensor(),
               call("aten::clamp", {ids, int64_t(-1), 2.5}).to_tensor(), 0, "clamp promotes");
}

// Sequence parallelism's all-gather -> mms and mm -> reduce-scatter, compiled (the collective
// matmuls), on the GPUs: the first run captures the plan's CUDA graph, two more replay it with new
// inputs; every output against the cpu interpreter of the graph as written, on every rank.
TEST_F(CudaTrainOps, CollectiveMatmulsOfSequenceParallelism) {
  if (device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  symmflow::testing::ScopedTunables every_size(symmflow::testing::decompose_every_size());
  for (int world : {2, 3, 4}) {
    // Ranks sharing a GPU wait on each other's lazily loaded cuBLAS kernels (Note [ranks sharing
    // a GPU] in src/runtime/cuda/heap.cpp): one GPU per rank here.
    if (world > device_count()) break;
    for (const char* dtype : {"f32", "bf16"}) {
      const std::string text = symmflow::testing::sequence_parallel_text(world, dtype);
      std::string after;
      passes::CompileOptions options;
      options.after_pass = [&](const std::string& pass, const ir::Graph& g) {
        if (pass == "schedule") after = ir::print_graph(g);
      };
      auto plan = passes::compile(ir::parse_graph(text, {"sp.sf", world}), options);
      ASSERT_NE(after.find("fused_all_gather_matmul"), std::string::npos) << after;
      ASSERT_NE(after.find("fused_matmul_reduce_scatter"), std::string::npos) << after;
      auto source = std::shared_ptr<ir::Graph>(ir::parse_graph(text, {"sp.sf", world}));
      run_threads(world, [&](Runtime& rt) {
        const int dev = bind_device();
        exec::Executable exe(plan, exec::ExecOptions{Device::cuda(dev)});
        for (int iter = 0; iter < 3; ++iter) {
          std::vector<Tensor> host;
          for (const ir::Value* v : source->inputs())
            host.push_back(symmflow::testing::make_input(v->type().shape, v->type().dtype,
                                                         rt.rank(), 10 * iter + 1));
          std::vector<Tensor> got = exe.run(host);  // the plan uploads them, stream-ordered
          std::vector<Tensor> want = exec::interpret(*source, host);
          ASSERT_EQ(got.size(), want.size());
          for (size_t i = 0; i < got.size(); ++i) {
            expect_close(got[i], want[i], std::string(dtype) == "f32" ? 1e-5 : 2e-2,
                         fmt::format("{} world {} rank {} iter {} output {}", dtype, world,
                                     rt.rank(), iter, i));
          }
        }
        EXPECT_NE(exe.device_description().find("CUDA graph of"), std::string::npos)
            << exe.device_description();
      }, ThreadsOptions{60});
    }
  }
}

}  // namespace
}  // namespace symmflow::cuda
