// GPU groups that span hosts (Note [nccl engine] in src/kernels/cuda/collectives/nccl.cpp): the
// GPUs of this machine as simulated hosts (ThreadsOptions::hosts: 2 GPUs as 2 hosts of 1, 3 as
// 2 + 1, 4 as 2 hosts of 2), one rank thread per GPU. Every collective of the group goes through
// NCCL and is compared, every element, with the cpu kernels of the same op on the same values in
// the same rank threads (the cpu's spanning path, tested against references in
// tests/collectives); the symmetric memory of such a group is its host's members' only; signals,
// loads and the fused ops are refused naming the group and its hosts; a peer that fails during
// an NCCL call is named within the timeout; the hierarchical all-reduce on two hosts of two GPUs.
// Skipped without two GPUs (the hierarchical test without four),
// or without NCCL (the reason printed). `tools/device/sf.sh spanning` runs it with NCCL kept off
// its peer-to-peer and shared-memory paths, as between real hosts.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/scoped_tunables.hpp"
#include "twins.hpp"

#include "kernels/cuda/collectives/nccl.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/heap.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::cuda {
namespace {

class CudaSpanning : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() < 2) GTEST_SKIP() << "needs two GPUs (one per simulated host)";
    if (!nccl::unavailable().empty()) GTEST_SKIP() << nccl::unavailable();
  }
  int world() const { return std::min(device_count(), 4); }
  std::vector<int> hosts() const {
    const int w = world();
    return w == 2 ? std::vector<int>{0, 1} : w == 3 ? std::vector<int>{0, 0, 1}
                                                    : std::vector<int>{0, 0, 1, 1};
  }
  void on_ranks(const std::function<void(Runtime&)>& fn) const {
    run_threads(world(), [&](Runtime& rt) {
      bind_device();
      fn(rt);
    }, ThreadsOptions{60, hosts()});
  }
};

// Quarters in [-2, 2]: sums of a few ranks are exact in every dtype.
Tensor values(const Shape& shape, DType dtype, uint64_t seed, int rank) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const uint64_t x = (seed * 7919 + uint64_t(rank) * 104729 + uint64_t(i)) * 0x9E3779B97F4A7C15ull;
    store_double(t.view(), i, double(int64_t((x >> 40) % 17) - 8) / 4);
  }
  return t;
}

std::string error_of(const std::string& op, const std::vector<Value>& args) {
  try {
    call(op, args);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST_F(CudaSpanning, AllReduceEveryFormDtypeAndReduceOp) {
  on_ranks([&](Runtime& rt) {
    for (DType d : {DType::f32, DType::bf16, DType::f16}) {
      for (int64_t n : {1, 7, 4096, 100003}) {
        for (const char* red : {"sum", "avg", "max", "min"}) {
          const std::string what = fmt::format("rank {} {} n {} {}", rt.rank(), dtype_name(d), n, red);
          // NCCL may scale each input before adding (ncclAvg): a few roundings, not one.
          const double tol = std::string(red) == "avg" ? 3 * one_rounding(d) : 0;
          Twin in = symmetric(values({n}, d, uint64_t(n), rt.rank()));
          Tensor want = call("symm_mem::one_shot_all_reduce", {in.cpu, red, "world"}).to_tensor();
          Tensor got = call("symm_mem::one_shot_all_reduce", {in.gpu, red, "world"}).to_tensor();
          expect_same(got, want, tol, "one_shot_all_reduce " + what);
          Tensor out = gpu_empty({n}, d);
          call("symm_mem::two_shot_all_reduce_out", {in.gpu, red, "world", out});
          expect_same(out, want, tol, "two_shot_all_reduce_out " + what);
          call("symm_mem::two_shot_all_reduce_", {in.gpu, red, "world"});  // in place
          expect_same(in.gpu, want, tol, "two_shot_all_reduce_ " + what);
        }
      }
    }
  });
}

// Note [hierarchical GPU all-reduce], turned on from 1 byte: two hosts of two GPUs (four GPUs);
// sizes that are not a multiple of 8 x 2 bytes go flat. Both forms, every reduce op.
TEST_F(CudaSpanning, HierarchicalAllReduceOnTwoHostsOfTwo) {
  if (world() < 4) GTEST_SKIP() << "needs four GPUs (two hosts of two)";
  Tunables t = tunables();
  t.cuda_hierarchical_min_bytes = 1;
  testing::ScopedTunables on(t);
  on_ranks([&](Runtime& rt) {
    for (DType d : {DType::f32, DType::bf16}) {
      for (int64_t n : {7, 4096, 100000}) {
        for (const char* red : {"sum", "avg", "max", "min"}) {
          const std::string what = fmt::format("rank {} {} n {} {}", rt.rank(), dtype_name(d), n, red);
          const double tol = std::string(red) == "avg" ? 3 * one_rounding(d) : 0;
          Twin in = symmetric(values({n}, d, uint64_t(n) + 13, rt.rank()));
          Tensor want = call("symm_mem::one_shot_all_reduce", {in.cpu, red, "world"}).to_tensor();
          Tensor got = call("symm_mem::one_shot_all_reduce", {in.gpu, red, "world"}).to_tensor();
          expect_same(got, want, tol, "hierarchical one_shot_all_reduce " + what);
          call("symm_mem::two_shot_all_reduce_", {in.gpu, red, "world"});
          expect_same(in.gpu, want, tol, "hierarchical two_shot_all_reduce_ " + what);
        }
      }
    }
  });
}

TEST_F(CudaSpanning, GatherScatterAllToAllPermuteBroadcastReduce) {
  on_ranks([&](Runtime& rt) {
    const int w = rt.world_size(), me = rt.rank();
    for (DType d : {DType::f32, DType::bf16}) {
      for (int64_t k : {1, 5, 333}) {
        const std::string what = fmt::format("rank {} {} k {}", me, dtype_name(d), k);
        Twin in = symmetric(values({k, 3}, d, uint64_t(k), me));
        Tensor cpu_g = Tensor::zeros({k * w, 3}, d), gpu_g = gpu_empty({k * w, 3}, d);
        call("symm_mem::all_gather_out", {in.cpu, "world", cpu_g});
        call("symm_mem::all_gather_out", {in.gpu, "world", gpu_g});
        expect_same(gpu_g, cpu_g, 0, "all_gather_out " + what);
        for (bool last : {false, true}) {
          const Shape shape = last ? Shape{5, w * k} : Shape{w * k, 5};
          const Shape out_shape = last ? Shape{5, k} : Shape{k, 5};
          Twin rs = symmetric(values(shape, d, uint64_t(k) + 3, me));
          Tensor cpu_o = Tensor::zeros(out_shape, d), gpu_o = gpu_empty(out_shape, d);
          call("symm_mem::reduce_scatter_out", {rs.cpu, "world", last, cpu_o});
          call("symm_mem::reduce_scatter_out", {rs.gpu, "world", last, gpu_o});
          expect_same(gpu_o, cpu_o, 0, fmt::format("reduce_scatter_out last {} {}", last, what));
        }
        Twin a2a = symmetric(values({w * k, 2}, d, uint64_t(k) + 5, me));
        Tensor cpu_a = Tensor::zeros({w * k, 2}, d), gpu_a = gpu_empty({w * k, 2}, d);
        call("symm_mem::all_to_all_out", {a2a.cpu, "world", cpu_a});
        call("symm_mem::all_to_all_out", {a2a.gpu, "world", gpu_a});
        expect_same(gpu_a, cpu_a, 0, "all_to_all_out " + what);
        for (int64_t shift : {int64_t(1), int64_t(-1), int64_t(w)}) {
          Tensor src = values({k, 4}, d, uint64_t(k) + 7, me);
          Twin out = symmetric(Tensor::zeros({k, 4}, d));
          call("symm_mem::collective_permute_out", {src, shift, "world", out.cpu});
          call("symm_mem::collective_permute_out", {to_device(src), shift, "world", out.gpu});
          expect_same(out.gpu, out.cpu, 0, fmt::format("collective_permute_out {} {}", shift, what));
        }
        Twin b = symmetric(values({k, 2}, d, uint64_t(k) + 9, me));
        call("symm_mem::broadcast_", {b.cpu, int64_t(w - 1), "world"});
        call("symm_mem::broadcast_", {b.gpu, int64_t(w - 1), "world"});
        expect_same(b.gpu, b.cpu, 0, "broadcast_ " + what);
        Twin r = symmetric(values({k, 2}, d, uint64_t(k) + 11, me));
        Tensor cpu_r = Tensor::zeros({k, 2}, d), gpu_r = gpu_empty({k, 2}, d);
        call("symm_mem::reduce_out", {r.cpu, int64_t(1), "sum", "world", cpu_r});
        call("symm_mem::reduce_out", {r.gpu, int64_t(1), "sum", "world", gpu_r});
        expect_same(gpu_r, cpu_r, 0, "reduce_out " + what);  // zeros off the root on both
        call("symm_mem::barrier", {"world", int64_t(0)});
      }
    }
  });
}

// Symmetric memory of a group across hosts maps this host's members only; signals, loads, the
// fused all-reduce + RMSNorm and all_to_all_vdev are refused naming the group and its hosts.
TEST_F(CudaSpanning, HostMemoryOnlyAndRefusalsNameTheHosts) {
  on_ranks([&](Runtime& rt) {
    const auto& g = rt.group("world");
    Tensor t = cuda::empty_symmetric({4}, DType::f32, "world");
    const DeviceHeap& heap = heap_of(t, "test", "t", *g);
    for (int r = 0; r < g->size(); ++r) {
      if (g->host_rank_of(r) >= 0) {
        EXPECT_NE(heap.peer(r), nullptr);
      } else {
        EXPECT_THROW(heap.peer(r), Error) << "rank " << r << " is on another host";
      }
    }
    const int other = g->rank() == 0 ? g->size() - 1 : 0;  // on the other host
    for (const std::string& msg :
         {error_of("symm_mem::put_signal", {to_device(Tensor::zeros({4}, DType::f32)), t,
                                            int64_t(other), int64_t(0), "world"}),
          error_of("symm_mem::get", {t, int64_t(other), "world", gpu_empty({4}, DType::f32)}),
          error_of("symm_mem::fused_all_reduce_add_rms_norm",
                   {t, gpu_empty({4}, DType::f32), to_device(Tensor::full({4}, DType::f32, 1)),
                    1e-6, "sum", "world"})}) {
      EXPECT_NE(msg.find("group 'world' spans 2 hosts"), std::string::npos) << msg;
    }
    call("symm_mem::barrier", {"world", int64_t(0)});
  });
}

// SYMMFLOW_DETERMINISTIC=1 refuses NCCL's reductions across hosts (their order depends on the
// size) on every rank, before anything is enqueued; set for the whole world, outside its threads.
TEST_F(CudaSpanning, DeterministicModeRefusesNcclReductions) {
  Tunables det = tunables();
  det.deterministic = true;
  testing::ScopedTunables on(det);
  on_ranks([&](Runtime&) {
    Tensor t = cuda::empty_symmetric({4}, DType::f32, "world");
    for (const char* op : {"symm_mem::one_shot_all_reduce", "symm_mem::two_shot_all_reduce_"}) {
      const std::string msg = error_of(op, {t, "sum", "world"});
      EXPECT_NE(msg.find("group 'world' spans 2 hosts and SYMMFLOW_DETERMINISTIC=1 is set, but "
                         "NCCL"),
                std::string::npos)
          << op << ": " << msg;
    }
  });
}

// The loader (Note [nccl engine]) names what it tried and why each was refused; no GPU needed.
// Each case runs in a fresh process (the library is opened once a process).
void expect_refusal(const char* library, const std::string& pattern) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("SYMMFLOW_NCCL_LIBRARY", library, 1);
        std::fprintf(stderr, "unavailable: %s\n", nccl::unavailable().c_str());
        std::exit(nccl::version() == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), pattern);
}

TEST(NcclLoader, AMissingLibraryIsNamed) {
  expect_refusal("/nonexistent/libnccl.so.2",
                 "unavailable: NCCL could not be opened \\(pip install nvidia-nccl-cu13, or set "
                 "SYMMFLOW_NCCL_LIBRARY to a libnccl.so.2\\); SYMMFLOW_NCCL_LIBRARY=/nonexistent/"
                 "libnccl.so.2: ");
}

TEST(NcclLoader, ALibraryWithoutAFunctionIsRefusedNamingIt) {
  expect_refusal(FAKE_NCCL_PARTIAL, "unavailable: the NCCL library opened lacks ncclGetUniqueId, "
                                    "ncclCommInitRank, .*ncclGroupEnd \\(NCCL 2.12 or later");
}

TEST(NcclLoader, AnOldVersionIsRefused) {
  expect_refusal(FAKE_NCCL_OLD, "unavailable: NCCL 21000 is too old \\(2.12 or later is needed\\)");
}

// Note [bounded NCCL waits]: the last rank fails while the others wait in an NCCL all-reduce for
// it; their wait ends within the timeout naming it, and the aborted group refuses further calls.
TEST_F(CudaSpanning, APeerThatFailsDuringAnNcclCallIsNamedAndTheWaitEnds) {
  const int w = world();
  std::vector<std::string> messages(static_cast<size_t>(w));
  std::vector<double> waited(static_cast<size_t>(w), 0);
  run_threads_collect(w, [&](Runtime& rt) {
    bind_device();
    Tensor t = cuda::empty_symmetric({1024}, DType::f32, "world");
    call("symm_mem::one_shot_all_reduce", {t, "sum", "world"});  // makes the communicator
    synchronize_spanning(current_stream(), "test");
    if (rt.rank() == w - 1) throw std::runtime_error("boom");
    const auto start = std::chrono::steady_clock::now();
    try {
      call("symm_mem::two_shot_all_reduce_", {t, "sum", "world"});
      synchronize_spanning(current_stream(), "test");
      messages[size_t(rt.rank())] = "no error";
    } catch (const Error& e) {
      messages[size_t(rt.rank())] = e.what();
    }
    waited[size_t(rt.rank())] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    messages[size_t(rt.rank())] += " | then: " + error_of("symm_mem::two_shot_all_reduce_", {t, "sum", "world"});
  }, ThreadsOptions{20, hosts()});
  for (int r = 0; r + 1 < w; ++r) {
    const std::string& m = messages[size_t(r)];
    EXPECT_NE(m.find(fmt::format("rank {} failed", w - 1)), std::string::npos) << m;
    EXPECT_NE(m.find("boom"), std::string::npos) << m;
    EXPECT_LT(waited[size_t(r)], 20.0) << m;
    EXPECT_NE(m.find("then: "), std::string::npos) << m;
    EXPECT_EQ(m.find("then: no error"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace symmflow::cuda
