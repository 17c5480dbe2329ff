// The report of `symmflow run` (run_report.hpp).
#include "run_report.hpp"

#include <algorithm>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>


namespace symmflow::tool {

namespace {

void write_trace(const std::string& path, const api::ExplainData& program,
                 const std::vector<RankResult>& results) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t r = 0; r < results.size(); ++r) {
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", 0},
                      {"tid", r},
                      {"args", {{"name", fmt::format("rank {}", r)}}}});
    for (const TraceEvent& e : results[r].events) {
      const api::ExplainStep& step = program.steps[size_t(e.step)];
      events.push_back({{"ph", "X"},
                        {"pid", 0},
                        {"tid", r},
                        {"name", step.name},
                        {"cat", step.communicates ? "comm" : "compute"},
                        {"ts", e.ts_us},
                        {"dur", e.dur_us},
                        {"args", {{"step", e.step}, {"iter", e.iter}}}});
    }
  }
  std::ofstream out(path);
  SF_CHECK(out.good(), "--trace: cannot write '{}'", path);
  out << nlohmann::json{{"traceEvents", events}}.dump() << "\n";
  SF_CHECK(out.good(), "--trace: cannot write '{}'", path);
}

}  // namespace

std::string to_json(const RankResult& r) {
  nlohmann::json events = nlohmann::json::array();
  for (const TraceEvent& e : r.events) events.push_back({e.step, e.iter, e.ts_us, e.dur_us});
  nlohmann::json j{{"iter_us", r.iter_us}, {"replay_us", r.replay_us}, {"device", r.device},
                   {"events", events},     {"worst", r.worst},         {"outputs", r.outputs},
                   {"elements", r.elements}};
  if (r.mismatch) j["mismatch"] = *r.mismatch;
  nlohmann::json mutated = nlohmann::json::array();
  for (const InputCheck& c : r.mutated) mutated.push_back({c.name, c.elements, c.worst});
  j["mutated"] = mutated;
  return j.dump();
}

RankResult rank_result_from_json(const std::string& text) try {
  nlohmann::json j = nlohmann::json::parse(text);
  RankResult r;
  r.iter_us = j.at("iter_us").get<std::vector<double>>();
  r.replay_us = j.at("replay_us").get<double>();
  r.device = j.at("device").get<std::string>();
  for (const nlohmann::json& e : j.at("events"))
    r.events.push_back({e[0].get<int>(), e[1].get<int>(), e[2].get<double>(), e[3].get<double>()});
  r.worst = j.at("worst").get<double>();
  r.outputs = j.at("outputs").get<size_t>();
  r.elements = j.at("elements").get<size_t>();
  if (j.contains("mismatch")) r.mismatch = j.at("mismatch").get<std::string>();
  for (const nlohmann::json& c : j.at("mutated"))
    r.mutated.push_back({c[0].get<std::string>(), c[1].get<size_t>(), c[2].get<double>()});
  return r;
} catch (const nlohmann::json::exception& e) {
  throw_error(ErrorCode::Internal, "symmflow run: a rank's result does not parse ({})", e.what());
}

int report(const api::ExplainData& program, const std::vector<RankResult>& results,
           const ReportOptions& o) {
  std::vector<double> t = results[0].iter_us;
  std::nth_element(t.begin(), t.begin() + ptrdiff_t(t.size() / 2), t.end());
  fmt::print("run: {} on {} ranks ({}, {}), {} iterations: median {:.1f} us/iter (rank 0)\n",
             program.program, results.size(), o.transport, results[0].device, o.iters,
             t[t.size() / 2]);
  if (o.device_replays) {
    double slowest = 0;
    for (const RankResult& r : results) slowest = std::max(slowest, r.replay_us);
    fmt::print("replay: {:.1f} us/iter (CUDA graph, inputs bound, {} replays back to back, "
               "slowest rank)\n",
               slowest, o.iters);
  }
  if (!o.trace.empty()) {
    write_trace(o.trace, program, results);
    fmt::print("trace: {}\n", o.trace);
  }
  if (!o.check) return 0;
  size_t elements = 0;
  double worst = 0;
  for (const RankResult& r : results) {
    if (r.mismatch) {
      fmt::print("check: FAILED: {}\n", *r.mismatch);
      return 1;
    }
    elements += r.elements;
    worst = std::max(worst, r.worst);
  }
  for (size_t i = 0; i < results[0].mutated.size(); ++i) {
    size_t input_elements = 0;
    double input_worst = 0;
    for (const RankResult& r : results) {
      input_elements += r.mutated.at(i).elements;
      input_worst = std::max(input_worst, r.mutated.at(i).worst);
    }
    fmt::print("check: input {} (mutated): OK ({} elements, largest error {:.2f} of the "
               "tolerance)\n",
               results[0].mutated[i].name, input_elements, input_worst);
  }
  fmt::print("check: OK ({} outputs, {} elements, largest error {:.2f} of the tolerance)\n",
             results[0].outputs, elements, worst);
  return 0;
}

}  // namespace symmflow::tool
