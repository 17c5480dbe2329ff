// The front door, part 2: what a compiled program's plan holds, as plain data (no IR types).
// Made once by compile() (src/api/explain.cpp, the one file of the api that reads Plan
// internals); printed by `symmflow explain` (format_explain) and as JSON (to_json), which
// explain_from_json reads back to an equal struct.
//
// Pools: each pool's planned peak beside its lower bound. Buffers: every planned value with its
// pool (a view or in-place result has pool_index -1 and pool "alias of <base>"), offset, bytes,
// dtype, shape and lifetime in steps. Copies: every compiler-added copy with its kind and reason.
// Collectives: every step with a group, its largest tensor's bytes and the algorithm each
// backend runs for it (kernels/algorithm.hpp). Steps: the schedule, with display names. Groups:
// every declared group ("world" first) with its size, its subgroups (global ranks, in group order)
// and the ranks in none (Note [explicit groups] in src/ir/graph.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "symmflow/core/dtype.hpp"
#include "symmflow/core/shape.hpp"

namespace symmflow::api {

struct ExplainPool {
  std::string name;  // "regular", "symm[tp]"
  size_t peak_bytes = 0;
  size_t lower_bound_bytes = 0;
  std::string order;  // the packing order kept: "start", "size" or "end"
  bool operator==(const ExplainPool&) const = default;
};

struct ExplainBuffer {
  std::string name;
  std::string pool;     // pool name, "alias of <buffer>" or "-"
  int pool_index = -1;  // into ExplainData::pools; -1 for views and in-place results
  size_t offset = 0;
  size_t bytes = 0;
  DType dtype = DType::f32;
  Shape shape;
  int first_step = 0;
  int last_step = 0;  // steps.size() for graph outputs
  bool intermediate = true;
  bool operator==(const ExplainBuffer&) const = default;
};

struct ExplainCopy {
  int step = -1;
  std::string kind;  // "input", "identity", "functional"
  std::string reason;
  size_t bytes = 0;
  bool operator==(const ExplainCopy&) const = default;
};

struct ExplainCollective {
  int step = 0;
  std::string op, group;
  int ranks = 1;  // group size
  int64_t bytes = 0;
  std::string cpu, cuda, why;  // algorithm per backend and the rule that chose it
  bool operator==(const ExplainCollective&) const = default;
};

struct ExplainStep {
  std::string name;          // display name ("aten::mm", "copy", "fused")
  bool communicates = false; // the op has a group argument
  bool operator==(const ExplainStep&) const = default;
};

struct ExplainGroup {
  std::string name;
  int ranks = 1;                             // ranks per subgroup
  std::vector<std::vector<int>> subgroups;   // `tp(2)` at 4 ranks: {0, 1}, {2, 3}
  std::vector<int> outside;                  // ranks in no subgroup
  bool operator==(const ExplainGroup&) const = default;
};

struct ExplainData {
  std::string program;  // the graph's name
  int world_size = 1;
  std::vector<ExplainStep> steps;
  std::vector<ExplainPool> pools;
  std::vector<ExplainBuffer> buffers;
  std::vector<ExplainCopy> copies;
  std::vector<ExplainCollective> collectives;
  std::vector<ExplainGroup> groups;
  bool operator==(const ExplainData&) const = default;
};

// JSON object {"program", "world_size", "steps", "pools", "buffers", "copies", "collectives",
// "groups"} (keys sorted, indented by `indent`; explain_from_json takes a JSON without "groups").
std::string to_json(const ExplainData& data, int indent = 2);
// Reads to_json's output; InvalidUsage naming what is missing or malformed.
ExplainData explain_from_json(const std::string& json);
// The text `symmflow explain` prints: pools, buffers, copies, collectives, per pool an
// occupancy chart over the steps, and the groups. `file` names the source in the first line.
std::string format_explain(const ExplainData& data, const std::string& file);

}  // namespace symmflow::api
