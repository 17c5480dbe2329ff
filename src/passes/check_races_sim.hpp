// The simulation behind check_races (src/passes/check_races.cpp, Note [happens-before]): steps as
// every rank runs them, and the vector-clock simulation over all ranks of the world.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "symmflow/ir/graph.hpp"

namespace symmflow::passes {

// One step of a run, with what it accesses (Note [what a step accesses]). Buffers are base
// values (views resolved).
struct SimStep {
  enum class Kind {
    local,    // compute, copies, fused regions
    sync,     // a barrier or a collective that is not one_sided (group), an entry barrier
    put,      // put_signal: remote_writes on the peer, then the signal
    wait,     // wait_signal: consumes the peer's signal
    get,      // get: remote_reads on the peer
    run_end,  // the caller reads the outputs and written-back values
  };
  Kind kind = Kind::local;
  const ir::Node* node = nullptr;  // null for entry barriers and run_end
  std::string group;               // sync, put, wait, get
  bool peer_relative = false;
  int64_t peer = -1;  // a group rank, or the rank-relative offset
  int64_t channel = 0;
  int run = 0;
  std::vector<const ir::Value*> reads, writes;                // on the rank that runs it
  std::vector<const ir::Value*> remote_reads, remote_writes;  // on the peer
};

// Runs `steps` on every rank of graph.world_size(); returns the races and unmatched signals.
std::vector<ir::Diagnostic> simulate_races(const ir::Graph& graph,
                                           const std::vector<SimStep>& steps);

}  // namespace symmflow::passes
