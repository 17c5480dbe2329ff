// The MPI side of `symmflow bench collectives`, run as `mpirun -np N symmflow bench collectives
// --internal-mpi-peer ...` by the command itself: measures the MPI peers (MPI_Allreduce,
// MPI_Reduce_scatter_block, MPI_Allgather on f32, out of place, the same sizes and timing
// convention as symmflow's side; symmflow/api/bench.hpp), and symmflow's ops on the mpi transport
// when asked. Rank 0 prints one JSON object between marker lines:
//   {"peers": [{"op": "MPI_Allreduce", "bytes": 8, "median_us": 3.1}, ...],
//    "symmflow": [{"op": "one_shot", "bytes": 8, "median_us": 2.0}, ...], "errors": [...]}
#include <iostream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/bench_internal.hpp"
#include "runtime/mpi_module.hpp"
#include "symmflow/api/bench.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/core/error.hpp"

namespace symmflow::api::bench {

namespace {

// MPI's collectives run in the mpi module (Note [mpi module] in src/runtime/mpi_module.cpp), which
// init_mpi loaded: this layer never sees mpi.h.
std::vector<Measurement> measure_peers(const Options& o, const Runtime& rt) {
  std::set<std::pair<std::string, int64_t>> cases;  // (peer, bytes), each measured once
  for (const std::string& op : o.ops) {
    for (int64_t b : sizes_for(o, op, rt.world_size())) cases.insert({peer_of(op), b});
  }
  const mpi_module::Hooks& mpi = mpi_module::hooks("bench collectives");
  std::vector<Measurement> out;
  for (const auto& [peer, bytes] : cases) {
    // The slowest rank per iteration, then the median (symmflow/api/bench.hpp).
    std::vector<double> samples = mpi.time_peer(peer, bytes, o.warmup, o.iters);
    if (rt.rank() == 0) out.push_back({peer, bytes, median(samples)});
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
  std::vector<Measurement> peers = measure_peers(o, rt);
  if (rt.rank() == 0) {
    nlohmann::json j = {{"ranks", rt.world_size()}, {"peers", to_json(peers)},
                        {"symmflow", to_json(ours)}, {"errors", errors}};
    std::cout << kJsonBegin << "\n" << j.dump() << "\n" << kJsonEnd << std::endl;
  }
  return 0;
}

}  // namespace symmflow::api::bench
