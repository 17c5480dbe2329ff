// The mpi module's entry (Note [mpi module] in src/runtime/mpi_module.cpp): registers the hooks
// as libsymmflow_mpi.so loads, and MPI's own collectives timed as the reference of `symmflow bench
// collectives` (mpi_module::Hooks::time_peer).
#include <chrono>

#include "mpi_check.hpp"
#include "mpi_module_impl.hpp"
#include "runtime/mpi_module.hpp"
#include "symmflow/core/error.hpp"

namespace symmflow::mpi_detail {

std::vector<double> time_peer(const std::string& peer, int64_t bytes, int warmup, int iters) {
  int ranks = 1;
  SF_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &ranks));
  SF_CHECK(peer == "MPI_Allreduce" || peer == "MPI_Reduce_scatter_block" ||
               peer == "MPI_Allgather",
           "time_peer: unknown MPI peer '{}'", peer);
  const int n = int(bytes / 4);
  std::vector<float> send(size_t(n), 1e-6f), recv(size_t(n), 0.0f);
  auto run = [&] {
    if (peer == "MPI_Allreduce") {
      SF_MPI_CHECK(MPI_Allreduce(send.data(), recv.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    } else if (peer == "MPI_Reduce_scatter_block") {
      SF_MPI_CHECK(MPI_Reduce_scatter_block(send.data(), recv.data(), n / ranks, MPI_FLOAT,
                                            MPI_SUM, MPI_COMM_WORLD));
    } else {
      SF_MPI_CHECK(MPI_Allgather(send.data(), n / ranks, MPI_FLOAT, recv.data(), n / ranks,
                                 MPI_FLOAT, MPI_COMM_WORLD));
    }
  };
  for (int i = 0; i < warmup; ++i) {
    SF_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    run();
  }
  std::vector<double> samples;
  for (int i = 0; i < iters; ++i) {
    SF_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    auto start = std::chrono::steady_clock::now();
    run();
    samples.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  // The slowest rank per iteration (symmflow/api/bench.hpp).
  SF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, samples.data(), int(samples.size()), MPI_DOUBLE,
                             MPI_MAX, MPI_COMM_WORLD));
  return samples;
}

namespace {

[[maybe_unused]] const bool registered = [] {
  mpi_module::register_hooks({&init_process, &time_peer});
  return true;
}();

}  // namespace

}  // namespace symmflow::mpi_detail
