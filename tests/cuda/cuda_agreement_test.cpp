// The GPU collectives' agreement (Note [gpu collective agreement] in
// src/kernels/cuda/collectives/call_signature.hpp): ranks that call an all-reduce with another reduce op,
// dtype or element count, on the ll path (4 KiB) and on the flag paths (one_shot and two_shot,
// 1 MiB), or a reduce-scatter with another reduce op, raise InvalidUsage on every rank naming the
// field and both ranks' values, leave the output untouched, and the failure is raised by the next
// call too (the host-mapped report), not only by synchronize(). Agreeing ranks after it work on a
// new group's communicator. Two rank threads, on two GPUs or sharing one (each on its own
// stream: tests/cuda/rank_stream.hpp); skipped without a GPU.
#include <cuda_runtime_api.h>

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "symmflow/core/error.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "rank_stream.hpp"

namespace symmflow::cuda {
namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

using testing::copy_on_rank_stream;
using testing::fill_on_rank_stream;
using testing::rank_stream;

void on_two_ranks(const std::function<void(Runtime&)>& fn) {
  run_threads(
      2,
      [&](Runtime& rt) {
        bind_device();
        fn(rt);
      },
      ThreadsOptions{20});
}

// What each rank passes to one all-reduce.
struct Call {
  DType dtype = DType::f32;
  const char* reduce_op = "sum";
  int64_t n = 1024;
};

// Runs `calls[rank]` as an all-reduce (`algo`: one_shot, or two_shot in a DeviceHeap) on both
// GPUs; returns each rank's error text ("" when none) and checks the output kept its sentinel.
std::vector<std::string> disagree(const Call (&calls)[2], Algo algo) {
  std::vector<std::string> errors(2);
  on_two_ranks([&](Runtime& rt) {
    const Call c = calls[rt.rank()];
    const size_t bytes = size_t(c.n) * dtype_size(c.dtype);
    auto comm = Communicator::create(rt.group("world"), 8 << 20);
    auto heap = DeviceHeap::allocate(rt.group("world"), 8 << 20);
    void* out = nullptr;
    CUDA_OK(cudaMalloc(&out, bytes));
    CUDA_OK(fill_on_rank_stream(heap->local(), 0x11, bytes));
    CUDA_OK(fill_on_rank_stream(out, 0x7f, bytes));
    try {
      if (algo == Algo::two_shot) {
        comm->all_reduce_inplace(*heap, 0, c.n, c.dtype, c.reduce_op, rank_stream(), Algo::two_shot);
      } else {
        comm->all_reduce(heap->local(), out, c.n, c.dtype, c.reduce_op, rank_stream(), algo);
      }
      CUDA_OK(cudaStreamSynchronize(static_cast<cudaStream_t>(rank_stream())));
      // The next call raises what the kernel recorded (no synchronize()).
      comm->all_reduce(heap->local(), out, c.n, c.dtype, c.reduce_op, rank_stream(), Algo::one_shot);
      ADD_FAILURE() << "rank " << rt.rank() << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << e.what();
      errors[size_t(rt.rank())] = e.what();
    }
    std::vector<unsigned char> host(bytes);
    const void* result = algo == Algo::two_shot ? heap->local() : out;
    CUDA_OK(copy_on_rank_stream(host.data(), result, bytes, cudaMemcpyDeviceToHost));
    const unsigned char sentinel = algo == Algo::two_shot ? 0x11 : 0x7f;
    size_t changed = 0;
    for (unsigned char b : host) changed += b != sentinel;
    EXPECT_EQ(changed, 0u) << "rank " << rt.rank() << ": bytes written despite the disagreement";
    // The group is poisoned (Note [poisoned groups]); a new group's communicator works.
    auto again = Communicator::create(rt.new_group("again", {0, 1}), 1 << 20);
    std::vector<float> ones(256, 1.0f + float(rt.rank()));
    CUDA_OK(copy_on_rank_stream(out, ones.data(), 1024, cudaMemcpyHostToDevice));
    again->all_reduce(out, out, 256, DType::f32, "sum", rank_stream());
    again->synchronize(rank_stream());
    CUDA_OK(copy_on_rank_stream(ones.data(), out, 1024, cudaMemcpyDeviceToHost));
    for (float f : ones) ASSERT_EQ(f, 3.0f);
    cudaFree(out);
  });
  return errors;
}

void expect_named(const std::vector<std::string>& errors, const std::string& rank0_line,
                  const std::string& rank1_line) {
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors[size_t(r)];
    EXPECT_NE(e.find("the ranks of group 'world' disagree (collective agreement on the GPU; no "
                     "data was exchanged)"),
              std::string::npos)
        << "rank " << r << ": " << e;
    EXPECT_NE(e.find(r == 0 ? rank0_line : rank1_line), std::string::npos)
        << "rank " << r << ": " << e;
  }
}

TEST(CudaAgreement, AnotherReduceOpRaisesOnEveryRankOnEveryPath) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  for (int64_t n : {int64_t(1024), int64_t(1) << 18}) {  // 4 KiB: ll; 1 MiB: flags
    for (Algo algo : {Algo::one_shot, Algo::two_shot}) {
      SCOPED_TRACE(fmt::format("{} elements, {}", n, algo_name(algo)));
      const Call calls[2] = {{DType::f32, "sum", n}, {DType::f32, "max", n}};
      expect_named(disagree(calls, algo), "reduce op: sum on rank 0; max on rank 1",
                   "reduce op: max on rank 1; sum on rank 0");
    }
  }
}

TEST(CudaAgreement, AnotherDtypeOfTheSameBytesRaises) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  for (int64_t n : {int64_t(2048), int64_t(1) << 19}) {
    SCOPED_TRACE(fmt::format("{} elements", n));
    const Call calls[2] = {{DType::bf16, "sum", n}, {DType::f16, "sum", n}};
    expect_named(disagree(calls, Algo::one_shot), "dtype: bf16 on rank 0; f16 on rank 1",
                 "dtype: f16 on rank 1; bf16 on rank 0");
  }
}

TEST(CudaAgreement, AnotherElementCountRaises) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  // Both within the ll path, and both on the flags path (launch shapes differ too).
  for (auto [a, b] : {std::pair<int64_t, int64_t>{1024, 1026}, {1 << 18, (1 << 18) + 4096}}) {
    SCOPED_TRACE(fmt::format("{} against {} elements", a, b));
    const Call calls[2] = {{DType::f32, "sum", a}, {DType::f32, "sum", b}};
    expect_named(disagree(calls, Algo::one_shot), "element count: hash", "element count: hash");
  }
}

TEST(CudaAgreement, AReduceScatterWithAnotherReduceOpRaises) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  std::vector<std::string> errors(2);
  on_two_ranks([&](Runtime& rt) {
    auto comm = Communicator::create(rt.group("world"), 1 << 20);
    auto heap = DeviceHeap::allocate(rt.group("world"), 1 << 20);
    void* out = nullptr;
    CUDA_OK(cudaMalloc(&out, 4096));
    const void* srcs[2] = {static_cast<char*>(heap->peer(0)) + rt.rank() * 4096,
                           static_cast<char*>(heap->peer(1)) + rt.rank() * 4096};
    try {
      comm->reduce_scatter(srcs, out, 1, 1024, 1024, DType::f32, rt.rank() == 0 ? "sum" : "min",
                           "symm_mem::reduce_scatter_out", rank_stream());
      comm->synchronize(rank_stream());
      ADD_FAILURE() << "rank " << rt.rank() << ": no error";
    } catch (const Error& e) {
      errors[size_t(rt.rank())] = e.what();
    }
    cudaFree(out);
  });
  expect_named(errors, "reduce op: sum on rank 0; min on rank 1",
               "reduce op: min on rank 1; sum on rank 0");
  EXPECT_EQ(errors[0].rfind("symm_mem::reduce_scatter_out: ", 0), 0u) << errors[0];
}

}  // namespace
}  // namespace symmflow::cuda
