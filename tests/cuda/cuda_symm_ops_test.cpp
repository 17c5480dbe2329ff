// The cuda kernels of the symm_mem ops other than all-reduce against the cpu kernels of the same
// ops, run side by side in the same rank threads on the same values: all_gather_out,
// reduce_scatter_out (both split dims), the _low_contention_ forms (every reduce op),
// all_to_all and all_to_all_out (equal blocks), all_to_all_vdev (uneven splits, bad splits), collective_permute(_out), put_signal/wait_signal,
// get, broadcast_, barrier, the u32 writes; world sizes 1, 2 and 3 (ranks share the GPUs round
// robin), awkward sizes, every element compared (equal bits; avg within one rounding). A peer
// that never arrives makes synchronize() raise naming the op and the peer;
// symm_mem::fused_all_reduce_add_rms_norm's one kernel and symm_mem::reduce_out against their cpu
// kernels. Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "device_api_kernels.hpp"
#include "twins.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/heap.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::cuda {
namespace {

class CudaSymmOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no GPU";
  }
};

void on_ranks(int world, const std::function<void(Runtime&)>& fn, double timeout_s = 20) {
  run_threads(world, [&](Runtime& rt) {
    bind_device();
    fn(rt);
  }, ThreadsOptions{timeout_s});
}

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

// Quarters in [-2, 2]: sums of a few ranks are exact in every dtype.
Tensor values(const Shape& shape, DType dtype, uint64_t seed, int rank) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = double(int64_t(mix(seed * 7919 + uint64_t(rank) * 104729 + uint64_t(i)) % 17) - 8);
    store_double(t.view(), i, is_floating(dtype) ? v / 4 : v + 8);
  }
  return t;
}

// The message of the error that calling `op` raises, or "no error".
std::string error_of(const std::string& op, const std::vector<Value>& args) {
  try {
    call(op, args);
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::string("no error");
}

TEST_F(CudaSymmOps, AllGatherEveryDtypeAndSize) {
  for (int w : {1, 2, 3}) {
    on_ranks(w, [&](Runtime& rt) {
      for (DType d : {DType::f32, DType::bf16, DType::f16, DType::i64, DType::i8}) {
        for (int64_t rows : {0, 1, 7, 1023, 4099}) {
          const std::string what = fmt::format("world {} rank {} {} rows {}", w, rt.rank(),
                                               dtype_name(d), rows);
          Twin in = symmetric(values({rows, 3}, d, uint64_t(rows), rt.rank()));
          Tensor cpu_out = Tensor::zeros({rows * w, 3}, d), gpu_out = gpu_empty({rows * w, 3}, d);
          call("symm_mem::all_gather_out", {in.cpu, "world", cpu_out});
          call("symm_mem::all_gather_out", {in.gpu, "world", gpu_out});
          expect_same(gpu_out, cpu_out, 0, "all_gather_out " + what);
          Tensor gathered = call("symm_mem::_low_contention_all_gather", {in.gpu, "world"}).to_tensor();
          expect_same(gathered, cpu_out, 0, "_low_contention_all_gather " + what);
        }
      }
    });
  }
}

TEST_F(CudaSymmOps, ReduceScatterBothSplitDimsAndEveryReduceOp) {
  for (int w : {1, 2, 3}) {
    on_ranks(w, [&](Runtime& rt) {
      for (DType d : {DType::f32, DType::bf16, DType::f16}) {
        for (int64_t k : {1, 7, 8, 64, 341}) {  // 8 and 64: 16-byte loads
          for (bool last : {false, true}) {
            const Shape shape = last ? Shape{5, w * k} : Shape{w * k, 5};
            const Shape out_shape = last ? Shape{5, k} : Shape{k, 5};
            const std::string what = fmt::format("world {} rank {} {} k {} split_last_dim {}", w,
                                                 rt.rank(), dtype_name(d), k, last);
            Twin in = symmetric(values(shape, d, uint64_t(k), rt.rank()));
            Tensor cpu_out = Tensor::zeros(out_shape, d), gpu_out = gpu_empty(out_shape, d);
            call("symm_mem::reduce_scatter_out", {in.cpu, "world", last, cpu_out});
            call("symm_mem::reduce_scatter_out", {in.gpu, "world", last, gpu_out});
            expect_same(gpu_out, cpu_out, 0, "reduce_scatter_out " + what);
          }
          Twin in = symmetric(values({w * k, 3}, d, uint64_t(k) + 1, rt.rank()));
          for (const char* op : {"sum", "avg", "max", "min"}) {
            Tensor want = call("symm_mem::_low_contention_reduce_scatter", {in.cpu, op, "world"}).to_tensor();
            Tensor got = call("symm_mem::_low_contention_reduce_scatter", {in.gpu, op, "world"}).to_tensor();
            expect_same(got, want, std::string(op) == "avg" ? one_rounding(d) : 0,
                        fmt::format("_low_contention_reduce_scatter {} world {} rank {} {} k {}",
                                    op, w, rt.rank(), dtype_name(d), k));
          }
        }
      }
    });
  }
}

TEST_F(CudaSymmOps, AllToAllVdevUnevenSplits) {
  for (int w : {1, 2, 3}) {
    on_ranks(w, [&](Runtime& rt) {
      for (DType d : {DType::f32, DType::bf16}) {
        for (int64_t row : {1, 3, 64}) {
          const int me = rt.rank();
          auto rows_from = [&](int p, int q) { return (p * 7 + q * 3 + row) % 5; };
          Tensor splits = Tensor::empty({w}, DType::i64);
          int64_t sent = 0;  // the most any rank sends: every input has that many rows
          for (int q = 0; q < w; ++q) store_double(splits.view(), q, double(rows_from(me, q)));
          for (int p = 0; p < w; ++p) {
            int64_t n = 0;
            for (int q = 0; q < w; ++q) n += rows_from(p, q);
            sent = std::max(sent, n);
          }
          const std::string what = fmt::format("world {} rank {} {} row {}", w, me, dtype_name(d), row);
          Twin in = symmetric(values({sent + 2, row}, d, uint64_t(row), me));
          Twin out = symmetric(Tensor::zeros({5 * w + 1, row}, d));
          Twin sp = symmetric(splits);
          Twin meta = symmetric(Tensor::zeros({2, w}, DType::i64));
          call("symm_mem::all_to_all_vdev", {in.cpu, out.cpu, sp.cpu, meta.cpu, "world"});
          call("symm_mem::all_to_all_vdev", {in.gpu, out.gpu, sp.gpu, meta.gpu, "world"});
          expect_same(out.gpu, out.cpu, 0, "out " + what);
          expect_same(meta.gpu, meta.cpu, 0, "out_splits_offsets " + what);
          // Every rank still holds its input until all finished reading it.
          call("symm_mem::barrier", {"world", int64_t(0)});
          communicator(rt.group("world"), 0).synchronize(current_stream());
        }
      }
    });
  }
}

TEST_F(CudaSymmOps, AllToAllVdevBadSplitsRaiseOnEveryRank) {
  std::vector<std::string> messages(2);
  on_ranks(2, [&](Runtime& rt) {
    Tensor splits = Tensor::full({2}, DType::i64, 1);
    if (rt.rank() == 1) store_double(splits.view(), 0, -1);
    Twin in = symmetric(Tensor::zeros({4, 2}, DType::f32));
    Twin out = symmetric(Tensor::full({4, 2}, DType::f32, 9));
    Twin sp = symmetric(splits);
    Twin meta = symmetric(Tensor::zeros({2, 2}, DType::i64));
    call("symm_mem::all_to_all_vdev", {in.gpu, out.gpu, sp.gpu, meta.gpu, "world"});
    try {
      communicator(rt.group("world"), 0).synchronize(current_stream());
    } catch (const Error& e) {
      messages[size_t(rt.rank())] = e.what();
    }
    // Nothing was copied.
    for (double v : to_host(out.gpu).to_doubles()) ASSERT_EQ(v, 9.0);
  });
  for (const std::string& m : messages)
    EXPECT_NE(m.find("symm_mem::all_to_all_vdev: rank 1 has invalid in_splits"), std::string::npos) << m;
}

// symm_mem::all_to_all(_out) (Note [equal all-to-all]): blocks of 0, 1, 7 and 1023 rows, rows of
// 3 elements and of [2, 5], f32, bf16, i64 and i8, against the cpu kernel on the same values.
TEST_F(CudaSymmOps, AllToAllEqualBlocks) {
  for (int w : {1, 2, 3}) {
    on_ranks(w, [&](Runtime& rt) {
      for (DType d : {DType::f32, DType::bf16, DType::i64, DType::i8}) {
        for (int64_t rows : {0, 1, 7, 1023}) {
          for (const Shape& row : {Shape{3}, Shape{2, 5}}) {
            Shape shape{rows * w};
            shape.insert(shape.end(), row.begin(), row.end());
            const std::string what = fmt::format("world {} rank {} {} {}", w, rt.rank(),
                                                 dtype_name(d), shape_str(shape));
            Twin in = symmetric(values(shape, d, uint64_t(rows), rt.rank()));
            Tensor cpu_out = Tensor::zeros(shape, d), gpu_out = gpu_empty(shape, d);
            call("symm_mem::all_to_all_out", {in.cpu, "world", cpu_out});
            call("symm_mem::all_to_all_out", {in.gpu, "world", gpu_out});
            expect_same(gpu_out, cpu_out, 0, "all_to_all_out " + what);
            Tensor cpu_r = call("symm_mem::all_to_all", {in.cpu, "world"}).to_tensor();
            Tensor gpu_r = call("symm_mem::all_to_all", {in.gpu, "world"}).to_tensor();
            expect_same(gpu_r, cpu_r, 0, "all_to_all " + what);
            communicator(rt.group("world"), 0).synchronize(current_stream());
          }
        }
      }
    });
  }
  on_ranks(2, [&](Runtime&) {
    Twin odd = symmetric(Tensor::zeros({5, 3}, DType::f32));
    EXPECT_EQ(error_of("symm_mem::all_to_all_out", {odd.gpu, "world", gpu_empty({5, 3}, DType::f32)}),
              "symm_mem::all_to_all_out: dim 0 of argument 'input' (f32[5, 3]) is not divisible "
              "by the group size 2");
  });
}

TEST_F(CudaSymmOps, CollectivePermuteEveryShift) {
  for (int w : {1, 2, 3}) {
    on_ranks(w, [&](Runtime& rt) {
      for (int64_t shift : {1, -1, 2}) {
        for (int64_t n : {0, 1, 7, 1023, 4099}) {
          const std::string what = fmt::format("world {} rank {} shift {} n {}", w, rt.rank(), shift, n);
          Tensor host = values({n}, DType::f32, uint64_t(n), rt.rank());
          Twin out = symmetric(Tensor::zeros({n}, DType::f32));
          Tensor gpu_in = to_device(host);
          call("symm_mem::collective_permute_out", {host, shift, "world", out.cpu});
          call("symm_mem::collective_permute_out", {gpu_in, shift, "world", out.gpu});
          expect_same(out.gpu, out.cpu, 0, "collective_permute_out " + what);
          Tensor got = call("symm_mem::collective_permute", {gpu_in, shift, "world"}).to_tensor();
          expect_same(got, out.cpu, 0, "collective_permute " + what);
        }
      }
    });
  }
}

TEST_F(CudaSymmOps, PutSignalThenWaitSignalOnARing) {
  for (int w : {1, 2, 3}) {
    on_ranks(w, [&](Runtime& rt) {
      const int me = rt.rank(), next = (me + 1) % w, prev = (me + w - 1) % w;
      for (int round = 0; round < 3; ++round) {
        for (int64_t n : {1, 7, 4099}) {
          Tensor dst = cuda::empty_symmetric({n}, DType::bf16, "world");
          Tensor src = to_device(values({n}, DType::bf16, uint64_t(round), me));
          call("symm_mem::put_signal", {src, dst, int64_t(next), int64_t(round), "world"});
          call("symm_mem::wait_signal", {dst, int64_t(prev), int64_t(round), "world"});
          Tensor want = values({n}, DType::bf16, uint64_t(round), prev);
          expect_same(dst, want, 0, fmt::format("world {} rank {} round {} n {}", w, me, round, n));
        }
      }
      communicator(rt.group("world"), 0).synchronize(current_stream());
    });
  }
}

TEST_F(CudaSymmOps, GetBroadcastBarrierAndU32Writes) {
  for (int w : {1, 2, 3}) {
    on_ranks(w, [&](Runtime& rt) {
      const int me = rt.rank();
      ASSERT_EQ(thread_device().type, DeviceType::cuda);
      for (int64_t n : {0, 1, 1023}) {
        Twin src = symmetric(values({n, 2}, DType::f16, uint64_t(n), me));
        call("symm_mem::barrier", {"world", int64_t(0)});  // every src is written
        Tensor out = gpu_empty({n, 2}, DType::f16);
        call("symm_mem::get", {src.gpu, int64_t((me + 1) % w), "world", out});
        expect_same(out, values({n, 2}, DType::f16, uint64_t(n), (me + 1) % w), 0,
                    fmt::format("get world {} rank {} n {}", w, me, n));
        call("symm_mem::barrier", {"world", int64_t(1)});  // nobody reads src any more
        for (int64_t root : {int64_t(0), int64_t(w - 1)}) {
          Twin b = symmetric(values({n}, DType::f32, uint64_t(n) + 5, me));
          call("symm_mem::broadcast_", {b.gpu, root, "world"});
          expect_same(b.gpu, values({n}, DType::f32, uint64_t(n) + 5, int(root)), 0,
                      fmt::format("broadcast_ root {} world {} rank {} n {}", root, w, me, n));
        }
      }
      Tensor flags = to_device(Tensor::zeros({10}, DType::u32));
      Tensor want = Tensor::zeros({10}, DType::u32);
      for (const Tensor& t : {flags, want}) {
        call("symm_mem::memset32_", {t, int64_t(2), int64_t(7), int64_t(5)});
        call("symm_mem::stream_write_value32_", {t, int64_t(9), int64_t(4000000000)});
      }
      expect_same(flags, want, 0, "u32 writes");
      std::string message;
      try {
        call("symm_mem::barrier", {"world", int64_t(99)});
      } catch (const Error& e) {
        message = e.what();
      }
      EXPECT_NE(message.find("symm_mem::barrier: channel 99 out of range for group 'world'"),
                std::string::npos)
          << message;
      // Bad arguments are refused on the host before anything is enqueued.
      Tensor sym = cuda::empty_symmetric({4}, DType::f32, "world");
      std::string m = error_of("symm_mem::put_signal", {sym, sym, int64_t(w), int64_t(0), "world"});
      EXPECT_NE(m.find(fmt::format("symm_mem::put_signal: peer {} out of range for group 'world' of size {}", w, w)),
                std::string::npos) << m;
      m = error_of("symm_mem::wait_signal", {sym, int64_t(0), int64_t(-1), "world"});
      EXPECT_NE(m.find("symm_mem::wait_signal: channel -1 out of range for group 'world'"), std::string::npos) << m;
      m = error_of("symm_mem::all_gather_out", {sym, "world", gpu_empty({5}, DType::f32)});
      EXPECT_NE(m.find("symm_mem::all_gather_out: argument 'out'"), std::string::npos) << m;
      m = error_of("symm_mem::all_gather_out", {gpu_empty({4}, DType::f32), "world", gpu_empty({4 * w}, DType::f32)});
      EXPECT_NE(m.find("is not in GPU symmetric memory"), std::string::npos) << m;
      communicator(rt.group("world"), 0).synchronize(current_stream());
    });
  }
}

// symm_mem::fused_all_reduce_add_rms_norm: the GPU kernel against the cpu kernel, whose result is
// bitwise the composition of one_shot_all_reduce, add.Tensor and rms_norm. residual_out has the
// same roundings (equal bits); out differs only in the order of the row's sum of squares. Both
// exchanges (Note [fused all-reduce rms_norm on GPUs]): the one_shot at its sizes and, with
// cuda_one_shot_max_bytes lowered, the two_shot at the same ones (rows fewer than, not a multiple
// of, and many more than the ranks; rows of 1 and 33 elements take one element per access), and
// a prefill's 600 rows of 4096 at the default limit (two_shot above 4 MiB at 2 ranks).
void check_fused_all_reduce_rms_norm(Runtime& rt, DType d, int64_t rows, int64_t n) {
  const std::string what = fmt::format("world {} rank {} {} rows {} n {} (one_shot limit {})",
                                       rt.world_size(), rt.rank(), dtype_name(d), rows, n,
                                       tunables().cuda_one_shot_max_bytes);
  Twin in = symmetric(values({rows, n}, d, uint64_t(n), rt.rank()));
  Tensor residual = values({rows, n}, d, uint64_t(n) + 1, 0);
  Tensor weight = values({n}, d, uint64_t(n) + 2, 0);
  for (const char* op : {"sum", "avg"}) {
    std::vector<Tensor> want = call("symm_mem::fused_all_reduce_add_rms_norm",
                                    {in.cpu, residual, weight, 1e-5, op, "world"})
                                   .to_tensor_list();
    std::vector<Tensor> got =
        call("symm_mem::fused_all_reduce_add_rms_norm",
             {in.gpu, to_device(residual), to_device(weight), 1e-5, op, "world"})
            .to_tensor_list();
    expect_same(got[1], want[1], 0, fmt::format("residual_out {} {}", op, what));
    expect_same(got[0], want[0], 2 * one_rounding(d) + 1e-5, fmt::format("out {} {}", op, what));
  }
}

TEST_F(CudaSymmOps, FusedAllReduceRmsNormMatchesTheComposition) {
  const Tunables before = tunables();
  for (int64_t limit : {before.cuda_one_shot_max_bytes, int64_t(64)}) {
    Tunables t = before;
    t.cuda_one_shot_max_bytes = limit;
    set_tunables(t);
    for (int w : {1, 2, 3}) {
      on_ranks(w, [&](Runtime& rt) {
        for (DType d : {DType::f32, DType::bf16, DType::f16}) {
          for (int64_t rows : {1, 7, 16, 131}) {
            for (int64_t n : {1, 33, 4096}) check_fused_all_reduce_rms_norm(rt, d, rows, n);
          }
        }
        if (limit == before.cuda_one_shot_max_bytes) {
          check_fused_all_reduce_rms_norm(rt, DType::bf16, 600, 4096);
          check_fused_all_reduce_rms_norm(rt, DType::f32, 601, 4096);
        }
        std::string message;
        try {
          call("symm_mem::fused_all_reduce_add_rms_norm",
               {symmetric(values({2, 8}, DType::f32, 1, 0)).gpu, gpu_empty({2, 8}, DType::f32),
                gpu_empty({9}, DType::f32), 1e-5, "sum", "world"});
        } catch (const Error& e) {
          message = e.what();
        }
        EXPECT_NE(message.find("symm_mem::fused_all_reduce_add_rms_norm: argument 'weight'"),
                  std::string::npos)
            << message;
      });
    }
  }
  set_tunables(before);
}

// symm_mem::reduce_out (Note [reduce to root]; one file, reduce_to_root.cu): the root's out against
// the cpu kernel on the same values (equal bits; avg within one rounding), every other rank's out
// untouched, every root, sizes up to past the communicator's first staging size.
TEST_F(CudaSymmOps, ReduceToRootMatchesTheCpuKernel) {
  for (int w : {1, 2, 3}) {
    on_ranks(w, [&](Runtime& rt) {
      for (DType d : {DType::f32, DType::bf16, DType::f16}) {
        for (int64_t n : {int64_t(1), int64_t(33), int64_t(4097), int64_t(1 << 19) + 3}) {
          Twin in = symmetric(values({n}, d, uint64_t(n), rt.rank()));
          for (const char* op : {"sum", "avg", "max", "min"}) {
            for (int root = 0; root < w; ++root) {
              const std::string what = fmt::format("world {} rank {} {} n {} {} root {}", w,
                                                   rt.rank(), dtype_name(d), n, op, root);
              Tensor want = Tensor::zeros({n}, d);
              call("symm_mem::reduce_out", {in.cpu, int64_t(root), op, "world", want});
              Tensor sentinel = values({n}, d, 99, 0);
              Tensor got = to_device(sentinel);
              call("symm_mem::reduce_out", {in.gpu, int64_t(root), op, "world", got});
              if (rt.rank() == root) {
                expect_same(got, want, std::string(op) == "avg" ? one_rounding(d) : 0, what);
              } else {
                expect_same(got, sentinel, 0, what + " (not the root: untouched)");
              }
            }
          }
        }
      }
      // Bad arguments are refused on the host, on every rank, before anything is enqueued.
      Twin in = symmetric(values({8}, DType::f32, 1, rt.rank()));
      auto message = [](const std::vector<Value>& args) { return error_of("symm_mem::reduce_out", args); };
      EXPECT_EQ(message({in.gpu, int64_t(w), "sum", "world", gpu_empty({8}, DType::f32)}),
                fmt::format("symm_mem::reduce_out: root {} out of range for group 'world' of size {}",
                            w, w));
      EXPECT_EQ(message({in.gpu, int64_t(0), "sum", "world", gpu_empty({9}, DType::f32)}),
                "symm_mem::reduce_out: argument 'out' is f32[9] but must be like 'input' (f32[8])");
      EXPECT_EQ(message({in.gpu, int64_t(0), "prod", "world", gpu_empty({8}, DType::f32)}),
                "symm_mem::reduce_out: unknown reduce_op 'prod' (valid: sum, avg, max, min)");
    });
  }
}

// A kernel of one's own signals through the communicator's pads (cuda_device.cuh): each rank's
// kernel writes into the next rank's inbox, raises its flag and waits for the previous rank's;
// the op-level put_signal/wait_signal then reuse the same flags (each was consumed).
TEST_F(CudaSymmOps, KernelsOfOnesOwnSignalThroughThePads) {
  for (int w : {1, 2, 3}) {
    on_ranks(w, [&](Runtime& rt) {
      const int me = rt.rank(), next = (me + 1) % w, prev = (me + w - 1) % w;
      const int64_t n = 1000;
      Tensor inbox = cuda::empty_symmetric({n}, DType::f32, "world");
      const DeviceHeap& heap = heap_of(inbox, "test", "inbox", *rt.group("world"));
      Tensor src = to_device(values({n}, DType::f32, 9, me));
      Tensor out = gpu_empty({n}, DType::f32);
      Tensor ok = to_device(Tensor::zeros({2}, DType::i32));
      Communicator& comm = communicator(rt.group("world"), 0);
      auto* next_inbox = static_cast<float*>(heap.peer(next));
      ASSERT_EQ(launch_ring_kernel(comm.signal_pads(), static_cast<const float*>(src.raw_data()),
                                   next_inbox, static_cast<const float*>(inbox.raw_data()),
                                   static_cast<float*>(out.raw_data()), n, next, prev, 3,
                                   static_cast<int*>(ok.raw_data()), current_stream()),
                0);
      EXPECT_EQ(to_host(ok).to_doubles(), (std::vector<double>{1, 1}));
      std::vector<double> got = to_host(out).to_doubles(), sent = values({n}, DType::f32, 9, prev).to_doubles();
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[size_t(i)], 2 * sent[size_t(i)]) << "element " << i;
      call("symm_mem::barrier", {"world", int64_t(0)});  // every kernel read its inbox
      call("symm_mem::put_signal", {src, inbox, int64_t(next), int64_t(3), "world"});
      call("symm_mem::wait_signal", {inbox, int64_t(prev), int64_t(3), "world"});
      expect_same(inbox, values({n}, DType::f32, 9, prev), 0, "op-level signal after the kernel's");
      comm.synchronize(current_stream());
    });
  }
}

TEST_F(CudaSymmOps, APeerThatNeverArrivesRaisesNamingOpAndPeer) {
  std::string wait_message, gather_message, after_message;
  on_ranks(2, [&](Runtime& rt) {
    Tensor dst = cuda::empty_symmetric({16}, DType::f32, "world");
    Communicator& comm = communicator(rt.group("world"), 0);  // collective
    if (rt.rank() == 1) return;  // never signals
    call("symm_mem::wait_signal", {dst, int64_t(1), int64_t(0), "world"});
    try {
      comm.synchronize(current_stream());
    } catch (const Error& e) {
      wait_message = e.what();
    }
    try {
      call("symm_mem::wait_signal", {dst, int64_t(1), int64_t(0), "world"});
    } catch (const Error& e) {
      after_message = e.what();
    }
  }, 2);
  EXPECT_NE(wait_message.find("symm_mem::wait_signal: timed out after 2 s in group 'world' on "
                              "rank 0 waiting for rank 1"),
            std::string::npos)
      << wait_message;
  EXPECT_NE(after_message.find("failed earlier"), std::string::npos) << after_message;
  on_ranks(2, [&](Runtime& rt) {
    Tensor in = cuda::empty_symmetric({16}, DType::f32, "world");
    communicator(rt.group("world"), 0);  // collective
    if (rt.rank() == 1) return;  // never gathers
    Tensor out = gpu_empty({32}, DType::f32);
    call("symm_mem::all_gather_out", {in, "world", out});
    try {
      communicator(rt.group("world"), 0).synchronize(current_stream());
    } catch (const Error& e) {
      gather_message = e.what();
    }
  }, 2);
  EXPECT_NE(gather_message.find("symm_mem::all_gather_out: timed out after 2 s in group 'world' "
                                "on rank 0 waiting for rank 1"),
            std::string::npos)
      << gather_message;
}

}  // namespace
}  // namespace symmflow::cuda
