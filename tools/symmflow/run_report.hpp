// What each rank of `symmflow run` measured and checked, and the report rank 0 prints from all of
// them (cmd_run.cpp): the same on the threads transport (results in one process) and under
// mpirun (results exchanged as JSON).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "symmflow/symmflow.hpp"

namespace symmflow::tool {

struct TraceEvent {
  int step = 0;
  int iter = 0;
  double ts_us = 0;
  double dur_us = 0;
};

// --check of one graph input that the run mutates (api::mutated_inputs), on one rank.
struct InputCheck {
  std::string name;
  size_t elements = 0;  // summed over iterations
  double worst = 0;     // the largest error over the tolerance
};

struct RankResult {
  std::vector<double> iter_us;
  double replay_us = 0;  // --device cuda: mean of back-to-back graph replays
  std::string device;    // the executable's device description
  std::vector<TraceEvent> events;
  std::optional<std::string> mismatch;  // the first bad element, when --check failed
  double worst = 0;                      // the largest error over the tolerance, with --check
  size_t outputs = 0;
  size_t elements = 0;
  std::vector<InputCheck> mutated;  // --check: every mutated graph input, in input order
};

std::string to_json(const RankResult& r);
RankResult rank_result_from_json(const std::string& text);

struct ReportOptions {
  std::string transport;
  std::string trace;  // write the trace here when not empty
  int iters = 1;
  bool device_replays = false;  // print the replay line (--device cuda)
  bool check = false;
};

// Prints the run line (rank 0's median), the replay line, the trace and the check result (a line
// per mutated graph input, "check: input x (mutated): OK (...)", then the outputs'); returns
// the exit code (1 when a rank's check failed).
// `program` names the program and its steps (the trace's events).
int report(const api::ExplainData& program, const std::vector<RankResult>& results,
           const ReportOptions& o);

}  // namespace symmflow::tool
