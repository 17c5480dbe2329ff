// The cuda backend with one process per rank (mpirun): GPU symmetric memory shared through cuMem
// file descriptors (Note [GPU memory between processes] in src/runtime/cuda/heap.cpp), then the
// collectives on it against values every rank can compute: one_shot and two_shot all-reduce,
// all_gather, put_signal/wait_signal on a ring, every element checked on every rank. Run with
// `mpirun -np 2 test_cuda_mpi` (ranks share GPUs round robin: two processes may share one GPU,
// which then time-slices their contexts). Skipped without a GPU.
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "symmflow/ops/call.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow::cuda {
namespace {

class CudaMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no GPU";
    bind_device();
  }
  Runtime& rt() { return Runtime::current(); }
};

// Element i of rank r: (r + 1) * (i % 5 + 1), exact in every dtype used here.
Tensor ramp(int64_t n, DType d, int r) {
  Tensor t = Tensor::empty({n}, d);
  for (int64_t i = 0; i < n; ++i) store_double(t.view(), i, double((r + 1) * (i % 5 + 1)));
  return t;
}

TEST_F(CudaMpi, HeapIsSharedBetweenProcesses) {
  const int w = rt().world_size(), me = rt().rank();
  for (int64_t n : {1, 1023, 1 << 20}) {
    Tensor x = empty_symmetric({n}, DType::f32, "world");
    call("aten::copy_", {x, ramp(n, DType::f32, me)});
    const double ranks = double(w * (w + 1) / 2);  // sum of r + 1
    std::vector<double> got =
        to_host(call("symm_mem::one_shot_all_reduce", {x, "sum", "world"}).to_tensor()).to_doubles();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[size_t(i)], ranks * double(i % 5 + 1)) << "one_shot n " << n << " i " << i;
    call("symm_mem::two_shot_all_reduce_", {x, "sum", "world"});
    got = to_host(x).to_doubles();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[size_t(i)], ranks * double(i % 5 + 1)) << "two_shot n " << n << " i " << i;
  }
}

TEST_F(CudaMpi, AllGatherAndSignalsBetweenProcesses) {
  const int w = rt().world_size(), me = rt().rank();
  const int64_t n = 4099;
  Tensor x = empty_symmetric({n}, DType::bf16, "world");
  call("aten::copy_", {x, ramp(n, DType::bf16, me)});
  Tensor out = to_device(Tensor::zeros({n * w}, DType::bf16));
  call("symm_mem::all_gather_out", {x, "world", out});
  std::vector<double> got = to_host(out).to_doubles();
  for (int r = 0; r < w; ++r) {
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[size_t(r * n + i)], double((r + 1) * (i % 5 + 1))) << "rank " << r << " i " << i;
  }
  Tensor inbox = empty_symmetric({n}, DType::bf16, "world");
  call("symm_mem::put_signal", {x, inbox, int64_t((me + 1) % w), int64_t(0), "world"});
  call("symm_mem::wait_signal", {inbox, int64_t((me + w - 1) % w), int64_t(0), "world"});
  got = to_host(inbox).to_doubles();
  const int prev = (me + w - 1) % w;
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(got[size_t(i)], double((prev + 1) * (i % 5 + 1))) << "inbox i " << i;
  communicator(rt().group("world"), 0).synchronize(current_stream());
  call("symm_mem::barrier", {"world", int64_t(0)});  // nobody reads x or inbox any more
  synchronize();
}

}  // namespace
}  // namespace symmflow::cuda
