// The MPI side of `symmflow bench collectives`, run as `mpirun -np N symmflow bench collectives
// --internal-mpi-peer ...` by the command itself: measures the MPI peers (MPI_Allreduce,
// MPI_Reduce_scatter_block, MPI_Allgather on f32, out of place, the same sizes and timing
// convention as symmflow's side; symmflow/api/bench.hpp), and symmflow's ops on the mpi transport
// when asked. Rank 0 prints one JSON object between marker lines:
//   {"peers": [{"op": "MPI_Allreduce", "bytes": 8, "median_us": 3.1}, ...],
//    "symmflow": [{"op": "one_shot", "bytes": 8, "median_us": 2.0}, ...], "errors": [...]}
#include <algorithm>
#include <chrono>
#include <iostream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/bench_internal.hpp"
#include "symmflow/api/bench.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/core/error.hpp"

#ifdef SYMMFLOW_HAVE_MPI
#include "runtime/mpi/mpi_check.hpp"
#endif

namespace symmflow::api::bench {

#ifdef SYMMFLOW_HAVE_MPI

namespace {

std::vector<Measurement> measure_peers(const Options& o, int ranks) {
  std::set<std::pair<std::string, int64_t>> cases;  // (peer, bytes), each measured once
  int64_t largest = 64;
  for (const std::string& op : o.ops) {
    for (int64_t b : sizes_for(o, op, ranks)) {
      cases.insert({peer_of(op), b});
      largest = std::max(largest, b);
    }
  }
  std::vector<float> send(size_t(largest / 4), 1e-6f), recv(size_t(largest / 4), 0.0f);
  std::vector<Measurement> out;
  int rank = 0;
  SF_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  for (const auto& [peer, bytes] : cases) {
    int n = int(bytes / 4);
    auto run = [&, peer = peer] {
      if (peer == "MPI_Allreduce") {
        SF_MPI_CHECK(MPI_Allreduce(send.data(), recv.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
      } else if (peer == "MPI_Reduce_scatter_block") {
        SF_MPI_CHECK(MPI_Reduce_scatter_block(send.data(), recv.data(), n / ranks, MPI_FLOAT, MPI_SUM,
                                              MPI_COMM_WORLD));
      } else {
        SF_MPI_CHECK(MPI_Allgather(send.data(), n / ranks, MPI_FLOAT, recv.data(), n / ranks,
                                   MPI_FLOAT, MPI_COMM_WORLD));
      }
    };
    for (int i = 0; i < o.warmup; ++i) {
      SF_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
      run();
    }
    std::vector<double> samples;
    for (int i = 0; i < o.iters; ++i) {
      SF_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
      auto start = std::chrono::steady_clock::now();
      run();
      samples.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
    // The slowest rank per iteration, then the median (symmflow/api/bench.hpp).
    SF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, samples.data(), int(samples.size()), MPI_DOUBLE,
                               MPI_MAX, MPI_COMM_WORLD));
    if (rank == 0) out.push_back({peer, bytes, median(samples)});
  }
  return out;
}

nlohmann::json to_json(const std::vector<Measurement>& ms) {
  nlohmann::json out = nlohmann::json::array();
  for (const Measurement& m : ms) out.push_back({{"op", m.op}, {"bytes", m.bytes}, {"median_us", m.median_us}});
  return out;
}

}  // namespace

int run_mpi_peer_child(const Options& o) {
  Runtime& rt = init_mpi();
  std::vector<std::string> errors;
  std::vector<Measurement> ours;
  if (o.transport == "mpi" || o.transport == "both") ours = measure_symmflow(rt, o, nullptr, errors);
  std::vector<Measurement> peers = measure_peers(o, rt.world_size());
  if (rt.rank() == 0) {
    nlohmann::json j = {{"ranks", rt.world_size()}, {"peers", to_json(peers)},
                        {"symmflow", to_json(ours)}, {"errors", errors}};
    std::cout << kJsonBegin << "\n" << j.dump() << "\n" << kJsonEnd << std::endl;
  }
  return 0;
}

#else

int run_mpi_peer_child(const Options&) {
  invalid_usage("bench collectives: symmflow was built without MPI, so there is no MPI peer to "
                "measure; install libopenmpi-dev and rebuild");
}

#endif

}  // namespace symmflow::api::bench
