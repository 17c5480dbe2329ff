// `symmflow bench collectives`: latency and bus bandwidth of symmflow's collectives against MPI
// measured in the same run (DESIGN.md: every benchmark prints its peer and the ratio).
//
//   symmflow bench collectives [--ranks N] [--transport threads|mpi|both] [--ops one_shot,...]
//                              [--min-bytes 8] [--max-bytes 64M] [--iters K] [--json]
//
// The threads transport is measured in this process. The MPI peers (and symmflow on the mpi
// transport) are measured by a child: this same binary under `mpirun -np N ... --internal-mpi-peer`,
// which prints JSON that is merged here (api::bench::measure_under_mpirun). Output: a table (op, transport, ranks, bytes, median_us,
// busbw_gbps, peer, peer_median_us, ratio = peer time / ours, >1 means symmflow is faster), or
// with --json a list of objects with those keys. Progress goes to stderr when it is a terminal.
// Timing convention and busbw formulas: symmflow/api/bench.hpp.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "symmflow/symmflow.hpp"

namespace symmflow::tool {

namespace {

namespace bench = api::bench;
using bench::Measurement;
using bench::Options;

struct Raw {  // what the command line gave, before checks
  std::string ops = "one_shot,two_shot,all_reduce,reduce_scatter,all_gather";
  std::string min_bytes = "8", max_bytes = "64M";
  bool internal_mpi_peer = false;
};

class ProgressBar {
 public:
  ProgressBar(int total) : total_(total), tty_(isatty(2) != 0) {}
  void step(const std::string& what) {
    if (!tty_) return;
    int done = ++done_;
    int width = 30, filled = total_ ? width * (done - 1) / total_ : width;
    std::fprintf(stderr, "\r[%s%s] %d/%d %-40s", std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(width - filled), ' ').c_str(), done, total_, what.c_str());
    std::fflush(stderr);
  }
  void note(const std::string& what) {
    if (tty_) std::fprintf(stderr, "\r%-80s\r%s\n", "", what.c_str());
  }
  void clear() {
    if (tty_) std::fprintf(stderr, "\r%-90s\r", "");
  }

 private:
  int total_, done_ = 0;
  bool tty_;
};

Options check(Options o, const Raw& raw) {
  SF_CHECK(o.ranks >= 1 && o.ranks <= 64, "bench: --ranks {} out of range [1, 64]", o.ranks);
  SF_CHECK(o.transport == "threads" || o.transport == "mpi" || o.transport == "both",
           "bench: --transport must be threads, mpi or both, not '{}'", o.transport);
  o.ops.clear();
  std::stringstream ss(raw.ops);
  for (std::string op; std::getline(ss, op, ',');) {
    SF_CHECK(std::find(bench::kOps.begin(), bench::kOps.end(), op) != bench::kOps.end(),
             "bench: unknown op '{}' (known: {})", op, fmt::join(bench::kOps, ", "));
    o.ops.push_back(op);
  }
  SF_CHECK(!o.ops.empty(), "bench: --ops is empty");
  o.min_bytes = bench::parse_bytes(raw.min_bytes);
  o.max_bytes = bench::parse_bytes(raw.max_bytes);
  SF_CHECK(o.min_bytes <= o.max_bytes, "bench: --min-bytes {} is above --max-bytes {}",
           o.min_bytes, o.max_bytes);
  SF_CHECK(o.max_bytes <= (int64_t(1) << 30), "bench: --max-bytes is limited to 1G");
  SF_CHECK(o.factor >= 2, "bench: --factor must be at least 2");
  SF_CHECK(o.iters >= 1 && o.warmup >= 0, "bench: --iters must be >= 1 and --warmup >= 0");
  return o;
}

int run_bench(Options o, const Raw& raw) {
  o = check(o, raw);
  if (raw.internal_mpi_peer) return bench::run_mpi_peer_child(o);

  std::vector<std::pair<std::string, std::vector<Measurement>>> ours;  // per transport
  std::vector<std::string> errors;
  int steps = 0;
  for (const std::string& op : o.ops) steps += int(bench::sizes_for(o, op, o.ranks).size());
  ProgressBar bar(o.transport == "mpi" ? 0 : steps);
  if (o.transport != "mpi") {
    bench::Progress progress = [&](const std::string& w) { bar.step(w); };
    ours.emplace_back("threads", bench::measure_threads(o, progress, errors));
  }
  std::vector<Measurement> peers;
  if (api::mpi_available()) {
    bar.note(fmt::format("bench: measuring the MPI peers{} under mpirun -np {} ...",
                         o.transport == "threads" ? "" : " and the mpi transport", o.ranks));
    bench::MpiMeasurements child = bench::measure_under_mpirun(
        o, {bench::self_path(), "bench", "collectives", "--internal-mpi-peer"});
    peers = std::move(child.peers);
    if (o.transport != "threads") ours.emplace_back("mpi", std::move(child.symmflow));
    for (std::string& e : child.errors) errors.push_back(std::move(e));
  } else {
    SF_CHECK(o.transport == "threads", "bench: the mpi transport needs a build with MPI");
    errors.push_back("no MPI in this build: no peer measured");
  }
  bar.clear();
  for (const std::string& e : errors) std::cerr << "bench: skipped " << e << "\n";

  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [transport, ms] : ours) {
    for (const Measurement& m : ms) {
      std::string peer = bench::peer_of(m.op);
      nlohmann::json row = {{"op", m.op},
                            {"transport", transport},
                            {"ranks", o.ranks},
                            {"bytes", m.bytes},
                            {"iters", o.iters},
                            {"median_us", m.median_us},
                            {"busbw_gbps", bench::busbw_gbps(m.op, m.bytes, m.median_us, o.ranks)},
                            {"peer", peer},
                            {"peer_median_us", nullptr},
                            {"peer_busbw_gbps", nullptr},
                            {"ratio", nullptr}};
      for (const Measurement& p : peers) {
        if (p.op != peer || p.bytes != m.bytes) continue;
        row["peer_median_us"] = p.median_us;
        row["peer_busbw_gbps"] = bench::busbw_gbps(m.op, p.bytes, p.median_us, o.ranks);
        row["ratio"] = p.median_us / m.median_us;
      }
      rows.push_back(row);
    }
  }
  if (o.json) {
    std::cout << rows.dump(2) << "\n";
    return 0;
  }
  fmt::print("{:<14} {:<9} {:>5} {:>9} {:>11} {:>10}  {:<24} {:>14} {:>7}\n", "op", "transport",
             "ranks", "bytes", "median_us", "busbw_gbps", "peer", "peer_median_us", "ratio");
  auto num = [](const nlohmann::json& v, const char* f) {
    return v.is_null() ? std::string("-") : fmt::format(fmt::runtime(f), v.get<double>());
  };
  for (const auto& r : rows) {
    fmt::print("{:<14} {:<9} {:>5} {:>9} {:>11.1f} {:>10.3f}  {:<24} {:>14} {:>7}\n",
               r["op"].get<std::string>(), r["transport"].get<std::string>(), r["ranks"].get<int>(),
               bench::format_bytes(r["bytes"].get<int64_t>()), r["median_us"].get<double>(),
               r["busbw_gbps"].get<double>(), r["peer"].get<std::string>(),
               num(r["peer_median_us"], "{:.1f}"), num(r["ratio"], "{:.2f}"));
  }
  fmt::print("\nmedian over {} iterations (after {} warm-up) of the slowest rank's time; busbw per "
             "NCCL; ratio = peer time / symmflow time (>1: symmflow faster)\n",
             o.iters, o.warmup);
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("bench", "Benchmarks, each against a peer measured in the same run");
  sub->require_subcommand(1);
  CLI::App* coll = sub->add_subcommand(
      "collectives", "Latency and bus bandwidth of the collectives vs MPI (f32; median over "
                     "iterations of the slowest rank's time)");
  auto o = std::make_shared<Options>();
  auto raw = std::make_shared<Raw>();
  coll->add_option("--ranks", o->ranks, "Ranks (threads, or MPI processes)")->capture_default_str();
  coll->add_option("--transport", o->transport, "threads, mpi or both")->capture_default_str();
  coll->add_option("--ops", raw->ops, "Comma-separated ops")->capture_default_str();
  coll->add_option("--min-bytes", raw->min_bytes, "Smallest size (K, M, G suffixes)")->capture_default_str();
  coll->add_option("--max-bytes", raw->max_bytes, "Largest size (K, M, G suffixes)")->capture_default_str();
  coll->add_option("--factor", o->factor, "Size step factor (4: powers of 4)")->capture_default_str();
  coll->add_option("--iters", o->iters, "Timed iterations per size")->capture_default_str();
  coll->add_option("--warmup", o->warmup, "Warm-up iterations per size")->capture_default_str();
  coll->add_flag("--json", o->json, "Print a JSON list of rows");
  coll->add_flag("--internal-mpi-peer", raw->internal_mpi_peer, "(internal: the child under mpirun)")
      ->group("");
  return {sub, [o, raw] { return run_bench(*o, *raw); }};
}

}  // namespace symmflow::tool
