// All-reduce on this host's GPUs: symmflow's cuda algorithms beside NCCL, measured in one run on
// the same GPUs, each captured as a CUDA graph of --calls calls and replayed; a sample is one
// replay's time / calls on the slowest rank; the figure is the median over --replays samples.
//
//   bench_cuda_allreduce [--dtype bf16] [--min 4K] [--max 256M] [--calls 10] [--replays 30]
//                        [--json FILE] [--hosts 0,1]
//
// Rows: symmflow (in place in a DeviceHeap buffer, the algorithm choose() picks: the figure that
// counts), symmflow_one_shot (out of place), symmflow_two_shot (in place), nccl (ncclAllReduce, in
// place), symmflow_fused_norm (symm_mem::fused_all_reduce_add_rms_norm_out over rows of 4096:
// the all-reduce with the residual add and the RMSNorm of a decoder layer, where the size holds
// whole rows; named symmflow_ so that tools/device/table.py never counts it as a peer).
// With --hosts (a simulated host id per GPU, ThreadsOptions::hosts) the world spans hosts: its
// rows are symmflow_spanning (symm_mem::two_shot_all_reduce_ on the group, which goes through
// NCCL: Note [nccl engine]) and nccl (ncclAllReduce called directly), the symmetric-memory rows
// having no group to run on.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#ifdef SYMMFLOW_BENCH_NCCL
#include <nccl.h>
#endif

#include "bench_util.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/cuda.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace {

using namespace symmflow;

int64_t parse_bytes(std::string t) {
  int64_t unit = 1;
  char last = t.empty() ? ' ' : t.back();
  if (last == 'K') unit = 1 << 10;
  if (last == 'M') unit = 1 << 20;
  if (last == 'G') unit = int64_t(1) << 30;
  if (unit != 1) t.pop_back();
  return std::stoll(t) * unit;
}

std::string fmt_bytes(int64_t b) {
  if (b >= (1 << 20)) return fmt::format("{}M", b >> 20);
  if (b >= 1024) return fmt::format("{}K", b >> 10);
  return fmt::format("{}", b);
}

struct Options {
  DType dtype = DType::bf16;
  int64_t min_bytes = 4096, max_bytes = 256 << 20;
  int calls = 10, replays = 30;
  std::string json;
  std::string impls;  // empty: all
  std::vector<int> hosts;  // --hosts: a simulated host per rank (empty: one host)
};

struct Row {
  std::string impl;
  int64_t bytes;
  double median_us;
};

void run(Runtime& rt, const Options& o, std::vector<Row>& rows) {
  cuda::bind_device();
  auto group = rt.group("world");
  const size_t es = dtype_size(o.dtype);
  const bool spanning = group->spans_hosts();  // Note [nccl engine]: no symmetric-memory rows
  std::unique_ptr<cuda::Communicator> comm;
  std::shared_ptr<cuda::DeviceHeap> heap;
  if (!spanning) {
    comm = cuda::Communicator::create(group, size_t(o.max_bytes));
    heap = cuda::DeviceHeap::allocate(group, size_t(o.max_bytes));
  }
  void *in = nullptr, *out = nullptr;
  SF_CUDA_CHECK(cudaMalloc(&in, size_t(o.max_bytes)));
  SF_CUDA_CHECK(cudaMalloc(&out, size_t(o.max_bytes)));
  SF_CUDA_CHECK(cudaMemset(in, 0, size_t(o.max_bytes)));
  cudaStream_t s;
  SF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Tensor spanned;  // the spanning group's symmetric buffer, its communicator made up front
  if (spanning) {
    spanned = cuda::empty_symmetric({o.max_bytes / int64_t(es)}, o.dtype, "world");
    cuda::StreamGuard on(s);
    call("symm_mem::two_shot_all_reduce_", {aten::slice(spanned, 0, 0, 1024), "sum", "world"});
    SF_CUDA_CHECK(cudaStreamSynchronize(s));
  }
#ifdef SYMMFLOW_BENCH_NCCL
  ncclUniqueId id;
  if (rt.rank() == 0) ncclGetUniqueId(&id);
  std::string blob(reinterpret_cast<char*>(&id), sizeof id);
  blob = group->allgather(blob, "bench")[0];
  std::memcpy(&id, blob.data(), sizeof id);
  ncclComm_t nccl;
  SF_CHECK(ncclCommInitRank(&nccl, rt.world_size(), id, rt.rank()) == ncclSuccess,
           "ncclCommInitRank failed");
  ncclDataType_t nt = o.dtype == DType::bf16  ? ncclBfloat16
                      : o.dtype == DType::f16 ? ncclFloat16
                                              : ncclFloat32;
  auto nccl_check = [](ncclResult_t r, const char* what) {
    SF_CHECK(r == ncclSuccess, "{} failed: {}", what, ncclGetErrorString(r));
  };
  // NCCL sets itself up on its first call, which must not be inside a capture.
  nccl_check(ncclAllReduce(in, in, 1024, nt, ncclSum, nccl, s), "ncclAllReduce (warm-up)");
  SF_CUDA_CHECK(cudaStreamSynchronize(s));
#endif
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
    const int64_t n = bytes / int64_t(es);
    auto wanted = [&](const std::string& impl) {
      return o.impls.empty() || ("," + o.impls + ",").find("," + impl + ",") != std::string::npos;
    };
    auto add = [&](const std::string& impl, const std::function<void()>& call) {
      if (!wanted(impl)) return;
      double us = bench::time_graph(*group, s, o.calls, o.replays, 3, call);
      if (comm) comm->check();
      if (rt.rank() == 0) {
        rows.push_back({impl, bytes, us});
        std::cerr << fmt::format("  {:<22} {:>6} {:>10.2f} us\n", impl, fmt_bytes(bytes), us);
      }
    };
    if (spanning) {
      const Tensor x = aten::slice(spanned, 0, 0, n);
      cuda::StreamGuard on(s);
      add("symmflow_spanning", [&] { call("symm_mem::two_shot_all_reduce_", {x, "sum", "world"}); });
    } else {
      add("symmflow", [&] { comm->all_reduce_inplace(*heap, 0, n, o.dtype, "sum", s); });
      add("symmflow_one_shot", [&] { comm->all_reduce(in, out, n, o.dtype, "sum", s); });
      add("symmflow_two_shot", [&] {
        comm->all_reduce_inplace(*heap, 0, n, o.dtype, "sum", s, cuda::Algo::two_shot);
      });
    }
#ifdef SYMMFLOW_BENCH_NCCL
    add("nccl", [&] {
      nccl_check(ncclAllReduce(in, in, size_t(n), nt, ncclSum, nccl, s), "ncclAllReduce");
    });
#endif
    constexpr int64_t kHidden = 4096;
    if (!spanning && n % kHidden == 0 && wanted("symmflow_fused_norm")) {
      const Shape shape{n / kHidden, kHidden};
      auto sym = [&](const Shape& sh) { return cuda::empty_symmetric(sh, o.dtype, "world"); };
      Tensor x = sym(shape), residual = sym(shape), weight = sym({kHidden}), y = sym(shape),
             residual_out = sym(shape);
      cuda::StreamGuard on(s);
      auto fused = [&] {
        call("symm_mem::fused_all_reduce_add_rms_norm_out",
             {x, residual, weight, 1e-6, "sum", "world", y, residual_out});
      };
      fused();  // the op's communicator is made on its first call, outside the capture
      SF_CUDA_CHECK(cudaStreamSynchronize(s));
      add("symmflow_fused_norm", fused);
    }
  }
#ifdef SYMMFLOW_BENCH_NCCL
  ncclCommDestroy(nccl);
#endif
  cudaStreamDestroy(s);
  cudaFree(in);
  cudaFree(out);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"All-reduce on this host's GPUs: symmflow (cuda backend) beside NCCL"};
  Options o;
  std::string dtype = "bf16", min_b = "4K", max_b = "256M";
  app.add_option("--dtype", dtype, "f32, bf16 or f16");
  app.add_option("--min", min_b, "Smallest size in bytes (K, M suffixes)");
  app.add_option("--max", max_b, "Largest size in bytes (powers of 4 from --min)");
  app.add_option("--calls", o.calls, "Calls per captured graph");
  app.add_option("--replays", o.replays, "Timed replays per size");
  app.add_option("--json", o.json, "Write the rows to this file as JSON");
  app.add_option("--impls", o.impls, "Comma-separated rows to measure (default: all)");
  std::string hosts;
  app.add_option("--hosts", hosts,
                 "A simulated host id per GPU, e.g. 0,1 or 0,0,1,1: the world spans hosts");
  CLI11_PARSE(app, argc, argv);
  try {
    std::optional<DType> d = parse_dtype(dtype);
    SF_CHECK(d && (*d == DType::f32 || *d == DType::bf16 || *d == DType::f16),
             "bench_cuda_allreduce: --dtype {}: expected f32, bf16 or f16", dtype);
    o.dtype = *d;
    o.min_bytes = parse_bytes(min_b);
    o.max_bytes = parse_bytes(max_b);
    int gpus = cuda::device_count();
    if (gpus < 1) {
      std::cerr << "bench_cuda_allreduce: no GPU\n";
      return 0;
    }
    int world = std::min(gpus, 8);
    for (size_t at = 0; !hosts.empty() && at <= hosts.size();) {
      const size_t comma = std::min(hosts.find(',', at), hosts.size());
      o.hosts.push_back(std::stoi(hosts.substr(at, comma - at)));
      at = comma + 1;
    }
    if (!o.hosts.empty()) {
      SF_CHECK(int(o.hosts.size()) <= gpus, "bench_cuda_allreduce: --hosts names {} ranks but {} "
               "GPUs are visible", o.hosts.size(), gpus);
      world = int(o.hosts.size());
    }
    std::vector<Row> rows;
    run_threads(world, [&](Runtime& rt) { run(rt, o, rows); }, ThreadsOptions{-1, o.hosts});
    nlohmann::json j = nlohmann::json::array();
    std::map<int64_t, std::map<std::string, double>> table;
    for (const Row& r : rows) {
      j.push_back({{"impl", r.impl},
                   {"bytes", r.bytes},
                   {"median_us", r.median_us},
                   {"ranks", world},
                   {"hosts", hosts},
                   {"dtype", dtype}});
      table[r.bytes][r.impl] = r.median_us;
    }
    if (!o.json.empty()) std::ofstream(o.json) << j.dump(1) << "\n";
    std::cout << fmt::format("{:>8} {:>12} {:>12} {:>12} {:>10} {:>14} {:>12}\n", "bytes",
                             "symmflow_us", "one_shot_us", "two_shot_us", "nccl_us",
                             "fused_norm_us", "spanning_us");  // symmflow_fused_norm, _spanning
    for (auto& [b, m] : table) {
      std::cout << fmt::format("{:>8} {:>12.2f} {:>12.2f} {:>12.2f} {:>10.2f} {:>14.2f} {:>12.2f}\n",
                               fmt_bytes(b), m["symmflow"], m["symmflow_one_shot"],
                               m["symmflow_two_shot"], m["nccl"], m["symmflow_fused_norm"],
                               m["symmflow_spanning"]);
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_cuda_allreduce: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
