// Inside the api's collective benchmark (bench_measure.cpp, bench_mpi_peer.cpp): the
// measurement on one rank of a runtime, shared by the threads entry point and the MPI child.
#pragma once

#include <string>
#include <vector>

#include "symmflow/api/bench.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow::api::bench {

// Collective over the world group of `rt`: every op of o.ops at every size, on the transport of
// `rt`. Returns rank 0's list (others return an empty list). An op that fails the same way on
// every rank (no kernel yet) is skipped and its error is added to `errors`.
std::vector<Measurement> measure_symmflow(Runtime& rt, const Options& o, const Progress& progress,
                                          std::vector<std::string>& errors);

}  // namespace symmflow::api::bench
