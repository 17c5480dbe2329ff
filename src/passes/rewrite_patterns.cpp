// rewrite_patterns: the pipeline's slot for registered rewrite patterns (Note [plugin rewrite
// patterns] in include/symmflow/passes/rewrite_patterns.hpp), and their registry.
//
// Expects: a verified, functionalized graph (the slot runs right after functionalize).
// Guarantees: every registered pattern, in registration order, applied to a fixed point by the
//   driver; nothing changes when none is registered or none matches. What a rewrite produces is
//   the pattern's responsibility (the pipeline's verifier checks it in debug builds).
// Refuses: a pattern that rewrites more often than the graph had nodes (it would loop), and a bad
//   registration (duplicate name, unknown root op, no function), both InvalidUsage naming the
//   pattern.
#include "symmflow/passes/rewrite_patterns.hpp"

#include <algorithm>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "symmflow/ops/registry.hpp"

namespace symmflow::passes {

namespace {

struct Queued {
  RewritePattern pattern;
  std::string where;  // file:line of the registration
};

struct PatternRegistry {
  std::mutex mutex;
  std::vector<Queued> pending;
  std::vector<RewritePattern> patterns;
};

PatternRegistry& pattern_registry() {
  static PatternRegistry r;
  return r;
}

// Moves the queue into the registry; every bad entry is dropped and reported in one error.
void drain(PatternRegistry& r) {
  std::vector<std::string> errors;
  for (Queued& q : r.pending) {
    const RewritePattern& p = q.pattern;
    bool duplicate = false;
    for (const RewritePattern& known : r.patterns) duplicate = duplicate || known.name == p.name;
    if (duplicate) {
      errors.push_back(fmt::format("rewrite pattern '{}' ({}) is registered twice", p.name,
                                   q.where));
    } else if (!Registry::global().find(p.root_op)) {
      errors.push_back(fmt::format("rewrite pattern '{}' ({}): root op '{}' is not registered",
                                   p.name, q.where, p.root_op));
    } else if (!p.rewrite) {
      errors.push_back(fmt::format("rewrite pattern '{}' ({}) has no rewrite function", p.name,
                                   q.where));
    } else {
      r.patterns.push_back(std::move(q.pattern));
    }
  }
  r.pending.clear();
  if (!errors.empty()) invalid_usage("{}", fmt::join(errors, "\n"));
}

// One pattern to a fixed point; returns its number of rewrites.
int apply_one(ir::Graph& graph, const RewritePattern& p, size_t budget) {
  int rewrites = 0;
  bool changed = true;
  while (changed) {
    changed = false;
    for (ir::Node* n : graph.nodes()) {
      if (n->kind() != ir::NodeKind::op || n->op()->name() != p.root_op) continue;
      if (!p.rewrite(graph, *n)) continue;
      SF_CHECK(size_t(++rewrites) <= budget,
               "rewrite pattern '{}' rewrote graph '{}' more than {} times (the nodes it had): "
               "a rewrite that returns true must erase its root node",
               p.name, graph.name(), budget);
      changed = true;
      break;  // the node list changed: scan again
    }
  }
  return rewrites;
}

}  // namespace

int apply_rewrite_patterns(ir::Graph& graph, std::span<const RewritePattern> patterns) {
  int rewrites = 0;
  for (const RewritePattern& p : patterns) {
    rewrites += apply_one(graph, p, std::max<size_t>(graph.nodes().size(), 1));
  }
  return rewrites;
}

std::vector<RewritePattern> registered_rewrite_patterns() {
  PatternRegistry& r = pattern_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.pending.empty()) drain(r);
  return r.patterns;
}

void rewrite_patterns(ir::Graph& graph) {
  std::vector<RewritePattern> patterns = registered_rewrite_patterns();
  if (!patterns.empty()) apply_rewrite_patterns(graph, patterns);
}

namespace detail {
int queue_rewrite_pattern(RewritePattern pattern, const char* file, int line) noexcept {
  PatternRegistry& r = pattern_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.pending.push_back({std::move(pattern), fmt::format("{}:{}", file, line)});
  return 0;
}
}  // namespace detail

}  // namespace symmflow::passes
