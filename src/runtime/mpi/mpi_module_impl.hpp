// What the mpi module (libsymmflow_mpi.so) registers as its hooks (src/runtime/mpi_module.hpp;
// Note [mpi module] in src/runtime/mpi_module.cpp). Private to src/runtime/mpi.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace symmflow {

class Runtime;

namespace mpi_detail {

// mpi_module::Hooks::init (contract in mpi_init.cpp).
Runtime& init_process(int* argc, char*** argv);
// mpi_module::Hooks::time_peer (contract in src/runtime/mpi_module.hpp).
std::vector<double> time_peer(const std::string& peer, int64_t bytes, int warmup, int iters);

}  // namespace mpi_detail
}  // namespace symmflow
