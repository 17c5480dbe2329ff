// The text of `symmflow explain` (format_explain in symmflow/api/explain.hpp), from the explain
// data alone: every planned buffer (pool, offset, size, lifetime first..last step, intermediate
// or output), every compiler-added copy with its reason, each pool's peak beside its lower bound,
// every collective with its group and algorithm, and a chart per pool of its occupancy over the
// steps (one row per step; the bar spans the pool's bytes, '#' where a live buffer lies). The
// summary "intermediate buffers: N" counts the distinct (pool, offset) places that intermediate
// values occupy. Views and in-place results (pool -1) are listed under their base. Last, the
// groups: name, ranks per subgroup, the subgroups and the ranks in none.
#include <algorithm>
#include <iterator>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "symmflow/api/explain.hpp"

namespace symmflow::api {

namespace {

constexpr int kBarWidth = 48;

// One row per step: '#' over the bytes of pool `p` that a live buffer covers at that step.
void format_chart(fmt::memory_buffer& out, const ExplainData& d, size_t p) {
  const ExplainPool& pool = d.pools[p];
  fmt::format_to(std::back_inserter(out), "\noccupancy of {} ({} B; each cell {} B):\n", pool.name,
                 pool.peak_bytes, (pool.peak_bytes + kBarWidth - 1) / kBarWidth);
  const int last = int(d.steps.size()) - 1;
  for (int s = 0; s <= last; ++s) {
    std::string bar(kBarWidth, '.');
    size_t live = 0;
    for (const ExplainBuffer& b : d.buffers) {
      if (b.pool_index != int(p) || s < b.first_step || s > std::min(b.last_step, last)) continue;
      live += b.bytes;
      if (pool.peak_bytes == 0) continue;
      size_t lo = b.offset * kBarWidth / pool.peak_bytes;
      size_t hi = ((b.offset + b.bytes) * kBarWidth + pool.peak_bytes - 1) / pool.peak_bytes;
      for (size_t c = lo; c < std::min<size_t>(hi, kBarWidth); ++c) bar[c] = '#';
    }
    fmt::format_to(std::back_inserter(out), "  {:>4} {:<32} |{}| {} B\n", s,
                   d.steps[size_t(s)].name, bar, live);
  }
}

}  // namespace

std::string format_explain(const ExplainData& d, const std::string& file) {
  fmt::memory_buffer out;
  auto put = std::back_inserter(out);
  fmt::format_to(put, "plan of {} ({}, {} ranks): {} steps\n", d.program, file, d.world_size,
                 d.steps.size());
  fmt::format_to(put, "\npools:\n");
  for (const ExplainPool& p : d.pools) {
    fmt::format_to(put, "  {:<16} peak {:>12} B   lower bound {:>12} B   (order {})\n", p.name,
                   p.peak_bytes, p.lower_bound_bytes, p.order);
  }
  fmt::format_to(put, "\nbuffers:\n");
  fmt::format_to(put, "  {:<20} {:<20} {:>10} {:>12} {:>11} {}\n", "name", "pool", "offset",
                 "bytes", "steps", "kind");
  std::set<std::pair<int, size_t>> places;
  for (const ExplainBuffer& b : d.buffers) {
    if (b.pool_index >= 0 && b.intermediate) places.insert({b.pool_index, b.offset});
    fmt::format_to(put, "  {:<20} {:<20} {:>#10x} {:>12} {:>5}..{:<5} {}\n", b.name, b.pool,
                   b.offset, b.bytes, b.first_step, b.last_step,
                   b.intermediate ? "intermediate" : "output");
  }
  std::vector<std::string> where;
  for (const auto& [pool, offset] : places)
    where.push_back(fmt::format("{}+{:#x}", d.pools[size_t(pool)].name, offset));
  fmt::format_to(put, "intermediate buffers: {} ({})\n", places.size(), fmt::join(where, ", "));
  fmt::format_to(put, "\ncompiler-added copies: {}\n", d.copies.size());
  for (const ExplainCopy& c : d.copies)
    fmt::format_to(put, "  step {} copy-{} {} B: {}\n", c.step, c.kind, c.bytes, c.reason);
  fmt::format_to(put, "\ncollectives: {} (algorithm per op, bytes and group size; tunables "
                 "one_shot_max_bytes, cuda_one_shot_max_bytes)\n", d.collectives.size());
  if (!d.collectives.empty()) {
    fmt::format_to(put, "  {:>4}  {:<34} {:<8} {:>5} {:>10}  {:<12} {:<20} {}\n", "step", "op",
                   "group", "ranks", "bytes", "cpu", "cuda", "why");
  }
  for (const ExplainCollective& c : d.collectives) {
    fmt::format_to(put, "  {:>4}  {:<34} {:<8} {:>5} {:>10}  {:<12} {:<20} {}\n", c.step, c.op,
                   c.group, c.ranks, c.bytes, c.cpu, c.cuda, c.why);
  }
  for (size_t p = 0; p < d.pools.size(); ++p) format_chart(out, d, p);
  fmt::format_to(put, "\ngroups: {}\n", d.groups.size());
  for (const ExplainGroup& g : d.groups) {
    std::vector<std::string> subgroups;
    for (const std::vector<int>& s : g.subgroups)
      subgroups.push_back(fmt::format("{{{}}}", fmt::join(s, ", ")));
    fmt::format_to(put, "  {:<8} {:>3} rank{} x {} subgroup{}: {}", g.name, g.ranks,
                   g.ranks == 1 ? " " : "s", g.subgroups.size(), g.subgroups.size() == 1 ? "" : "s",
                   fmt::join(subgroups, ", "));
    if (!g.outside.empty()) fmt::format_to(put, "; in none: {}", fmt::join(g.outside, ", "));
    fmt::format_to(put, "\n");
  }
  return fmt::to_string(out);
}

}  // namespace symmflow::api
