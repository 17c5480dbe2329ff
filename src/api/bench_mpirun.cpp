// The parent side of the MPI measurement of `symmflow bench collectives` (symmflow/api/bench.hpp):
// starts the child under mpirun and reads the JSON object it prints between marker lines.
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "symmflow/api/bench.hpp"
#include "symmflow/core/error.hpp"

#ifndef SYMMFLOW_MPIEXEC
#define SYMMFLOW_MPIEXEC "mpirun"
#endif

namespace symmflow::api::bench {

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<Measurement> from_json(const nlohmann::json& list) {
  std::vector<Measurement> out;
  for (const auto& m : list) out.push_back({m.at("op"), m.at("bytes"), m.at("median_us")});
  return out;
}

}  // namespace

std::string self_path() {
  std::array<char, 4096> buf{};
  ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  SF_CHECK(n > 0, "bench: cannot find this program's path (/proc/self/exe)");
  return std::string(buf.data(), size_t(n));
}

MpiMeasurements measure_under_mpirun(const Options& o,
                                     const std::vector<std::string>& child_command) {
  std::vector<std::string> quoted;
  for (const std::string& a : child_command) quoted.push_back(shell_quote(a));
  std::string cmd = fmt::format(
      "{} --allow-run-as-root --oversubscribe -np {} {} "
      "--transport {} --ops {} --min-bytes {} --max-bytes {} --factor {} --iters {} --warmup {}",
      SYMMFLOW_MPIEXEC, o.ranks, fmt::join(quoted, " "), o.transport, fmt::join(o.ops, ","),
      o.min_bytes, o.max_bytes, o.factor, o.iters, o.warmup);
  // MPI ranks poll; with more ranks than cores they must yield or they starve each other.
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
  FILE* pipe = popen(cmd.c_str(), "r");
  SF_CHECK(pipe, "bench: cannot start `{}`", cmd);
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  int status = pclose(pipe);
  size_t begin = out.find(kJsonBegin), end = out.find(kJsonEnd);
  SF_CHECK(status == 0 && begin != std::string::npos && end != std::string::npos,
           "bench: the MPI run failed (exit status {}): {}\noutput:\n{}", status, cmd, out);
  begin += std::string(kJsonBegin).size();
  try {
    nlohmann::json child = nlohmann::json::parse(out.substr(begin, end - begin));
    MpiMeasurements m{from_json(child.at("peers")), from_json(child.at("symmflow")), {}};
    for (const auto& e : child.at("errors")) m.errors.push_back(e.get<std::string>());
    return m;
  } catch (const nlohmann::json::exception& e) {
    invalid_usage("bench: the MPI run printed JSON that does not parse ({})", e.what());
  }
}

}  // namespace symmflow::api::bench
