// The cuda backend's all-reduce on every GPU of this host (one rank thread per GPU) against a host
// reference computed the way the cpu kernels do (f32 accumulation in rank order, one rounding):
// every algorithm x dtype x reduce op x awkward size, out of place at unaligned offsets and in
// place, with guard elements around the output that must not change; CUDA graph replay with new
// inputs on every replay; a rank that never arrives; a mismatched allocation. Skipped without GPUs.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "symmflow/core/error.hpp"
#include "symmflow/core/half.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow::cuda {
namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

int gpus() {
  return device_count();
}

// Runs fn on one rank thread per GPU (at most 8), each bound to its GPU.
void on_gpus(const std::function<void(Runtime&)>& fn, double timeout_s = 20) {
  run_threads(
      std::min(gpus(), 8),
      [&](Runtime& rt) {
        bind_device();
        fn(rt);
      },
      ThreadsOptions{timeout_s});
}

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}
// Input element i of `rank`: integers in [-15, 15] (exact in every dtype and sum) or, when
// `real`, values in (-4, 4) with fractions.
float input(uint64_t seed, int rank, int64_t i, bool real) {
  uint64_t h = mix(seed * 1315423911ull ^ (uint64_t(rank) << 40) ^ uint64_t(i));
  if (!real) return float(int64_t(h % 31) - 15);
  return float(int64_t(h % 80001) - 40000) / 10000.0f;
}

size_t elem_size(DType d) {
  return d == DType::f32 ? 4 : 2;
}
uint32_t encode(DType d, float f) {
  if (d == DType::bf16) return BFloat16(f).bits;
  if (d == DType::f16) return Half(f).bits;
  return std::bit_cast<uint32_t>(f);
}
float decode(DType d, const char* p) {
  if (d == DType::f32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, p, 2);
  return d == DType::bf16 ? float(BFloat16::from_bits(b)) : float(Half::from_bits(b));
}
void put(DType d, char* p, float f) {
  uint32_t bits = encode(d, f);
  std::memcpy(p, &bits, elem_size(d));
}

// Host bytes of rank's input (n elements).
std::vector<char> make_input(DType d, uint64_t seed, int rank, int64_t n, bool real) {
  std::vector<char> out(size_t(n) * elem_size(d));
  for (int64_t i = 0; i < n; ++i) put(d, out.data() + i * elem_size(d), input(seed, rank, i, real));
  return out;
}

// The value every rank must hold at element i: rank-order reduction in f32, one rounding.
float expected(DType d, const std::string& op, uint64_t seed, int world, int64_t i, bool real) {
  auto at = [&](int r) {
    std::vector<char> b(4);
    put(d, b.data(), input(seed, r, i, real));
    return decode(d, b.data());
  };
  float acc = at(0);
  for (int r = 1; r < world; ++r) {
    float v = at(r);
    if (op == "max")
      acc = acc < v ? v : acc;
    else if (op == "min")
      acc = v < acc ? v : acc;
    else
      acc = acc + v;
  }
  if (op == "avg") acc = acc / float(world);
  std::vector<char> b(4);
  put(d, b.data(), acc);
  return decode(d, b.data());
}

enum class Mode { out_of_place, one_shot_inplace, two_shot_inplace };

struct Case {
  Mode mode;
  DType dtype;
  std::string op;
  int64_t n;
};

std::string describe(const Case& c) {
  const char* m = c.mode == Mode::out_of_place       ? "one_shot out of place"
                  : c.mode == Mode::one_shot_inplace ? "one_shot in place"
                                                     : "two_shot in place";
  return fmt::format("{} {} {} n={}", m, dtype_name(c.dtype), c.op, c.n);
}

// Elements on each side of the output: odd to misalign it (every other case), or 64 so that it is
// aligned and the 16-byte and "ll" paths run.
int64_t guard_for(uint64_t seed) {
  return seed % 2 ? 37 : 64;
}
constexpr int64_t kMaxGuard = 64;

void run_case(Runtime& rt, Communicator& comm, const DeviceHeap& heap, const Case& c,
              uint64_t seed) {
  const size_t es = elem_size(c.dtype);
  const int world = rt.world_size();
  const bool real = c.op != "max" && c.op != "min" ? (seed % 2 == 1) : true;
  std::vector<char> in = make_input(c.dtype, seed, rt.rank(), c.n, real);
  const size_t bytes = in.size();
  // Out of place: the input at an odd element offset of a plain buffer, the output between guards.
  char* base = static_cast<char*>(heap.local());
  const int64_t kGuard = guard_for(seed);
  std::vector<char> sentinel((size_t(c.n) + 2 * kGuard) * es, char(0x5a));
  char* data = nullptr;
  void* scratch = nullptr;
  if (c.mode == Mode::out_of_place) {
    ASSERT_EQ(cudaMalloc(&scratch, bytes + 64), cudaSuccess);
    char* src = static_cast<char*>(scratch) + es * (seed % 2 ? 3 : 8);
    ASSERT_EQ(cudaMemcpy(src, in.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(base, sentinel.data(), sentinel.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    data = base + kGuard * es;
    comm.all_reduce(src, data, c.n, c.dtype, c.op, nullptr);
  } else {
    ASSERT_EQ(cudaMemcpy(base, sentinel.data(), sentinel.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    data = base + kGuard * es;
    ASSERT_EQ(cudaMemcpy(data, in.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    rt.group("world")->barrier(0, "test");  // peers write into our buffer only after this
    comm.all_reduce_inplace(heap, kGuard * es, c.n, c.dtype, c.op, nullptr,
                            c.mode == Mode::one_shot_inplace ? Algo::one_shot : Algo::two_shot);
  }
  comm.synchronize(nullptr);
  std::vector<char> got(sentinel.size());
  ASSERT_EQ(cudaMemcpy(got.data(), base, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  if (scratch) cudaFree(scratch);
  for (int64_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(got[size_t(i) * es], 0x5a) << describe(c) << ": guard before the output changed";
    ASSERT_EQ(got[(size_t(kGuard + c.n + i)) * es], 0x5a) << describe(c) << ": guard after changed";
  }
  const double tol = c.dtype == DType::f32 ? 1e-6 : c.dtype == DType::f16 ? 1e-3 : 8e-3;
  int64_t bad = 0;
  for (int64_t i = 0; i < c.n && bad < 5; ++i) {
    float want = expected(c.dtype, c.op, seed, world, i, real);
    float have = decode(c.dtype, got.data() + (kGuard + i) * es);
    if (!(std::fabs(have - want) <= tol * std::max(1.0f, std::fabs(want))) ||
        (!real && have != want)) {
      ADD_FAILURE() << describe(c) << " rank " << rt.rank() << " element " << i << ": got " << have
                    << ", want " << want;
      ++bad;
    }
  }
  rt.group("world")->barrier(1, "test");  // nobody starts the next case while a peer checks
}

TEST(CudaAllReduce, EveryAlgorithmDtypeOpAndSize) {
  if (gpus() < 1) GTEST_SKIP() << "no GPU";
  // SYMMFLOW_TEST_SMALL (compute-sanitizer runs): the small sizes only.
  std::vector<int64_t> sizes = {1, 7, 8, 1023, 4096 + 3, 65536, (1 << 20) + 8, 3 * (1 << 20) + 5};
  if (std::getenv("SYMMFLOW_TEST_SMALL")) sizes = {1, 7, 8, 1023, 4096 + 3};
  const int64_t max_n = 3 * (1 << 20) + 5;
  on_gpus([&](Runtime& rt) {
    auto comm = Communicator::create(rt.group("world"), size_t(max_n) * 4);
    auto heap = DeviceHeap::allocate(rt.group("world"), (size_t(max_n) + 2 * kMaxGuard) * 4);
    uint64_t seed = 1;
    for (Mode m : {Mode::out_of_place, Mode::one_shot_inplace, Mode::two_shot_inplace}) {
      for (DType d : {DType::f32, DType::bf16, DType::f16}) {
        for (const char* op : {"sum", "avg", "max", "min"}) {
          for (int64_t n : sizes) {
            run_case(rt, *comm, *heap, Case{m, d, op, n}, seed++);
            if (::testing::Test::HasFailure()) return;
          }
        }
      }
    }
  });
}

TEST(CudaAllReduce, ZeroElementsIsANoOp) {
  if (gpus() < 1) GTEST_SKIP() << "no GPU";
  on_gpus([&](Runtime& rt) {
    auto comm = Communicator::create(rt.group("world"), 1024);
    comm->all_reduce(nullptr, nullptr, 0, DType::bf16, "sum", nullptr);
    comm->synchronize(nullptr);
  });
}

TEST(CudaAllReduce, BadArgumentsAreRefused) {
  if (gpus() < 1) GTEST_SKIP() << "no GPU";
  on_gpus([&](Runtime& rt) {
    auto comm = Communicator::create(rt.group("world"), 1024);
    void* p = nullptr;
    CUDA_OK(cudaMalloc(&p, 4096));
    auto msg = [&](const std::function<void()>& f) {
      try {
        f();
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string("<no error>");
    };
    EXPECT_EQ(
        msg([&] { comm->all_reduce(p, p, 1024, DType::f32, "sum", nullptr); }),
        "cuda all_reduce: 4096 bytes exceed the communicator's max_bytes 1024 (group 'world')");
    EXPECT_EQ(msg([&] { comm->all_reduce(p, p, 4, DType::i32, "sum", nullptr); }),
              "cuda all_reduce: dtype i32 is not supported on the GPU (f32, bf16, f16)");
    EXPECT_EQ(msg([&] { comm->all_reduce(p, p, 4, DType::f32, "prod", nullptr); }),
              "cuda all_reduce: unknown reduce_op 'prod' (valid: sum, avg, max, min)");
    EXPECT_NE(msg([&] {
                comm->all_reduce(p, p, 4, DType::f32, "sum", nullptr, Algo::two_shot);
              }).find("allocate the buffer with cuda::DeviceHeap"),
              std::string::npos);
    cudaFree(p);
  });
}

// The whole step (copy in from pinned host memory, all-reduce, copy out) captured once as a CUDA
// graph and replayed 1000 times with new input values each time.
TEST(CudaAllReduce, GraphReplayWithChangingInputs) {
  if (gpus() < 1) GTEST_SKIP() << "no GPU";
  const int64_t n = 4096;  // bf16, 8 KiB
  on_gpus([&](Runtime& rt) {
    const int world = rt.world_size();
    auto comm = Communicator::create(rt.group("world"), size_t(n) * 2);
    auto heap = DeviceHeap::allocate(rt.group("world"), size_t(n) * 2);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint16_t *host_in = nullptr, *host_out = nullptr;
    CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&host_in), size_t(n) * 2));
    CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&host_out), size_t(n) * 2));
    for (Algo algo : {Algo::one_shot, Algo::two_shot}) {
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      cudaMemcpyAsync(heap->local(), host_in, size_t(n) * 2, cudaMemcpyHostToDevice, s);
      comm->all_reduce_inplace(*heap, 0, n, DType::bf16, "sum", s, algo);
      cudaMemcpyAsync(host_out, heap->local(), size_t(n) * 2, cudaMemcpyDeviceToHost, s);
      CUDA_OK(cudaStreamEndCapture(s, &graph));
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      for (int it = 0; it < 1000; ++it) {
        for (int64_t i = 0; i < n; ++i)
          host_in[i] = BFloat16(float((i + it * 7 + rt.rank()) % 17)).bits;
        // Peers write into our buffer during the replay: start together.
        rt.group("world")->barrier(0, "replay");
        CUDA_OK(cudaGraphLaunch(exec, s));
        comm->synchronize(s);
        for (int64_t i = 0; i < n; ++i) {
          float want = 0;
          for (int r = 0; r < world; ++r) want += float((i + it * 7 + r) % 17);
          ASSERT_EQ(float(BFloat16::from_bits(host_out[i])), want)
              << algo_name(algo) << " replay " << it << " element " << i;
        }
        rt.group("world")->barrier(1, "replay");
      }
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
    cudaFreeHost(host_in);
    cudaFreeHost(host_out);
    cudaStreamDestroy(s);
  });
}

// Rank 1 never calls: rank 0's kernel gives up after the timeout and synchronize() raises on the
// host naming the missing rank; the process goes on.
TEST(CudaAllReduce, RankThatNeverArrivesRaisesOnTheHost) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  std::string error;
  on_gpus(
      [&](Runtime& rt) {
        auto comm = Communicator::create(rt.group("world"), 4096);
        void* p = nullptr;
        CUDA_OK(cudaMalloc(&p, 4096));
        if (rt.rank() == 0) {
          try {
            comm->all_reduce(p, p, 1024, DType::f32, "sum", nullptr);
            comm->synchronize(nullptr);
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::Timeout);
            error = e.what();
          }
          try {
            comm->all_reduce(p, p, 1024, DType::f32, "sum", nullptr);
            ADD_FAILURE() << "a failed communicator accepted a call";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("failed earlier"), std::string::npos) << e.what();
          }
        }
        cudaDeviceSynchronize();
        cudaFree(p);
      },
      0.5);
  EXPECT_EQ(error.rfind("cuda all_reduce: timed out after 0.5 s in group 'world' on rank 0 waiting "
                        "for rank 1",
                        0),
            0u)
      << error;
}

TEST(CudaAllReduce, MismatchedAllocationNamesEveryRank) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  std::vector<std::string> errors(size_t(std::min(gpus(), 8)));
  on_gpus([&](Runtime& rt) {
    try {
      DeviceHeap::allocate(rt.group("world"), 1024 * size_t(rt.rank() + 1));
    } catch (const Error& e) {
      errors[size_t(rt.rank())] = e.what();
    }
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("differs across ranks"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 1: allocation #0 of 2048 bytes"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace symmflow::cuda
