// Checks of an emitted plan that do not trust the planner's own live ranges (e2e test).
#pragma once

#include <string>
#include <vector>

#include "symmflow/passes/plan.hpp"

namespace symmflow::e2e {

struct PoolRatio {
  std::string pool;
  size_t peak = 0, lower_bound = 0;
};

// Live ranges recomputed from the graph (uses of a buffer and of its aliases, outputs and
// writebacks to the end, peer-written symm buffers for the whole run, a `get` source until the
// next synchronising collective of its group); then: the planner's ranges cover them, no two
// buffers of a pool live at a common step overlap in bytes, each pool's peak is >= the most bytes
// live at one step, and its reported lower bound equals that. Returns the problems found (empty:
// fine) and appends each pool's (peak, lower bound).
std::vector<std::string> check_plan(const passes::Plan& plan, std::vector<PoolRatio>* ratios);

// The communication sequence of a plan: one line per step of a group (op, group, literals except
// peers, operand types).
std::vector<std::string> comm_sequence(const passes::Plan& plan);

}  // namespace symmflow::e2e
