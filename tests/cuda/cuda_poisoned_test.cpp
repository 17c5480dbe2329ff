// Issue 39 items 1-3 on GPUs (Note [poisoned groups] in include/symmflow/runtime/group.hpp): after
// a GPU collective of a group failed (the ranks disagreed, a kernel timed out) or a rank aborted,
// every later call of the group raises on every rank, on the communicator that failed, on another
// communicator of the same group and in a plan's run, naming the first error; a new group of the
// same ranks then gives right sums. Two rank threads, on two GPUs or sharing one (Note [ranks
// sharing a GPU] in src/runtime/cuda/heap.cpp); skipped without a GPU.
#include <cuda_runtime_api.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
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

constexpr int64_t kN = 1024;  // f32 elements: the one-shot flag path

void on_two_ranks(double timeout_s, const std::function<void(Runtime&)>& fn) {
  run_threads(
      2,
      [&](Runtime& rt) {
        bind_device();
        fn(rt);
      },
      ThreadsOptions{timeout_s});
}

using testing::rank_stream;

// The error text of one all-reduce of `n` floats on `comm`, synchronized ("" when none).
std::string all_reduce_error(Communicator& comm, void* buf, const char* op = "sum") {
  try {
    comm.all_reduce(buf, buf, kN, DType::f32, op, rank_stream(), Algo::one_shot);
    comm.synchronize(rank_stream());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// 100 calls on each communicator, every one raising with `first` in its text.
void expect_every_call_raises(std::vector<Communicator*> comms, void* buf,
                              const std::string& first, int rank) {
  for (Communicator* c : comms) {
    int raised = 0;
    for (int i = 0; i < 100; ++i) {
      const std::string e = all_reduce_error(*c, buf);
      raised += !e.empty();
      if (i == 0) {
        EXPECT_NE(e.find(first), std::string::npos) << "rank " << rank << ": " << e;
      }
    }
    EXPECT_EQ(raised, 100) << "rank " << rank;
  }
}

// A new group of both ranks: right sums, three times.
void expect_new_group_works(Runtime& rt, const std::string& name, float* buf) {
  auto comm = Communicator::create(rt.new_group(name, {0, 1}), 1 << 20);
  for (int k = 0; k < 3; ++k) {
    std::vector<float> mine(kN, float(rt.rank() + 1 + k));
    CUDA_OK(testing::copy_on_rank_stream(buf, mine.data(), kN * 4, cudaMemcpyHostToDevice));
    comm->all_reduce(buf, buf, kN, DType::f32, "sum", rank_stream(), Algo::one_shot);
    comm->synchronize(rank_stream());
    CUDA_OK(testing::copy_on_rank_stream(mine.data(), buf, kN * 4, cudaMemcpyDeviceToHost));
    for (float f : mine) ASSERT_EQ(f, float(3 + 2 * k));
  }
}

TEST(CudaPoisoned, AfterADisagreementEveryCallRaisesAndANewGroupWorks) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  on_two_ranks(20, [](Runtime& rt) {
    auto comm = Communicator::create(rt.group("world"), 1 << 20);
    auto other = Communicator::create(rt.group("world"), 1 << 20);  // same group, not failed
    float* buf = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), kN * 4));
    const std::string e = all_reduce_error(*comm, buf, rt.rank() == 0 ? "sum" : "max");
    EXPECT_NE(e.find("disagree (collective agreement on the GPU"), std::string::npos) << e;
    expect_every_call_raises({comm.get(), other.get()}, buf, "sum on rank 0", rt.rank());
    expect_new_group_works(rt, "again", buf);
    cudaFree(buf);
  });
}

TEST(CudaPoisoned, AfterATimeoutEveryCallOfBothRanksRaisesAndANewGroupWorks) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  std::atomic<bool> timed_out{false};
  on_two_ranks(2, [&](Runtime& rt) {
    auto comm = Communicator::create(rt.group("world"), 1 << 20);
    float* buf = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), kN * 4));
    if (rt.rank() == 0) {  // rank 1 never calls: rank 0's kernel gives up
      const std::string e = all_reduce_error(*comm, buf);
      EXPECT_NE(e.find("timed out after 2 s in group 'world' on rank 0 waiting for rank 1"),
                std::string::npos)
          << e;
      timed_out.store(true);
    } else {
      while (!timed_out.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // Rank 1 learns rank 0's timeout from the group (it never saw a failed kernel itself).
    expect_every_call_raises({comm.get()}, buf, "timed out after 2 s", rt.rank());
    expect_new_group_works(rt, "again", buf);
    cudaFree(buf);
  });
}

TEST(CudaPoisoned, AfterAnAbortEveryCallOfBothRanksRaises) {
  if (device_count() == 0) GTEST_SKIP() << "no GPU";
  std::atomic<bool> aborted{false};
  run_threads_collect(
      2,
      [&](Runtime& rt) {
        bind_device();
        auto comm = Communicator::create(rt.group("world"), 1 << 20);
        float* buf = nullptr;
        CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&buf), kN * 4));
        EXPECT_EQ(all_reduce_error(*comm, buf), "");
        rt.group("world")->barrier(0, "before abort");
        if (rt.rank() == 0) {
          rt.abort("rank 0 gave up");
          aborted.store(true);
        } else {
          while (!aborted.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        expect_every_call_raises({comm.get()}, buf, "rank 0 gave up", rt.rank());
        cudaFree(buf);
      },
      ThreadsOptions{20});
}

}  // namespace
}  // namespace symmflow::cuda
