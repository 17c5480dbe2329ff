// Random valid programs in the graph IR for the end-to-end property test (issue 4, item 6).
//
// A program is a source graph as a user writes it (before any pass): 2-d values of one dtype per
// program (f32, f64, bf16 or f16), pointwise
// ops (unary, binary, Scalar), matmul, views (view, reshape, t, transpose.int, slice.Tensor with
// steps: non-contiguous ones included), in-place and out calls (graph inputs too: writebacks),
// and every symm_mem collective that runs on CPU without multicast, over two groups: `tp` (the
// whole world) and `sub` (blocks of 2 ranks, or of 1 on 3 ranks).
//
// Validity rules kept by the generator: no value is written through a view or after a view of it
// was taken (functionalize refuses both); an op never gets one value in two written arguments;
// all_to_all_vdev sends one row to every rank (splits made by aten::full); p2p patterns are
// published as users write them (barrier before put_signal / get, barrier
// after get); shapes satisfy every op's constraints (reduce-scatter divisibility, matmul inner
// dims).
//
// SPMD: the graph depends on (seed, world_size) only: the peers of put_signal / wait_signal / get
// are rank-relative (`rank+s`, `rank-s`), so every rank builds the same graph and the race
// checker (passes/check_races.hpp) resolves them per rank.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "symmflow/ir/graph.hpp"

namespace symmflow::e2e {

struct ProgramOptions {
  uint64_t seed = 1;
  int world_size = 2;
  int rank = 0;  // unused since the peers are rank-relative; kept for callers
  int ops = 18;  // approximate number of generated operations
};

struct Program {
  std::unique_ptr<ir::Graph> graph;
  std::map<std::string, int> features;  // feature or op kind -> times generated
};

Program random_program(const ProgramOptions& options);

}  // namespace symmflow::e2e
