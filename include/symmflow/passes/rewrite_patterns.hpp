// Rewrite patterns: graph rewrites that plugins (and tests) register next to their ops, run by the
// pipeline in one fixed slot, the pass `rewrite_patterns` (Note [plugin rewrite patterns]).
//
//   // in a plugin, beside SYMMFLOW_LIBRARY(mylib, m) { m.def("bias_gelu(...)"); }
//   bool fuse_bias_gelu(symmflow::ir::Graph& g, symmflow::ir::Node& gelu) { ... }
//   SYMMFLOW_REWRITE_PATTERN(mylib, fuse_bias_gelu, "aten::gelu", fuse_bias_gelu,
//                            "gelu(x + bias) becomes mylib::bias_gelu(x, bias)");
//   (examples/custom_op/ holds a complete plugin; docs/plugins.md is the guide.)
//
// Note [plugin rewrite patterns]
// A pattern is (name, root op, rewrite function). The ops layer knows no IR, so patterns live in
// the passes layer and are registered by their own macro rather than through `Library`; a plugin
// uses both, and its patterns exist exactly while the plugin is loaded (plugins never unload).
// Like SYMMFLOW_LIBRARY, the macro only queues: nothing is checked during static initialisation
// (a throw there would abort dlopen). The queue is drained on the first use after a load
// (registered_rewrite_patterns(), hence every compile), where a duplicate name, an unknown root
// op or an empty function is an InvalidUsage naming the pattern and the file:line that queued it.
// The slot is after functionalize and before every built-in fusion (fuse_allreduce_rmsnorm,
// fuse_pointwise): a pattern sees the graph as written, in functional form (no node writes an
// argument), with no fused nodes and no layouts yet, and its output goes through every later
// pass. `--print-after rewrite_patterns` shows the result. The driver (apply_rewrite_patterns)
// runs the patterns in registration order (plugins in load order), each to a fixed point: it
// scans the nodes in program order and calls rewrite(graph, node) at every op node whose op is
// the root op; after a rewrite it scans again from the start. A rewrite either returns false and
// leaves the graph untouched, or rewrites and returns true, having erased `root` (replacing the
// uses of its outputs); the rewritten graph must mean the same (compiled results equal eager
// ones). A pattern that reports more rewrites than the graph had nodes is refused, so a wrong
// pattern fails instead of looping.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "symmflow/ir/graph.hpp"

namespace symmflow::passes {

struct RewritePattern {
  std::string name;     // unique: "mylib::fuse_bias_gelu"
  std::string root_op;  // qualified op of the node the rewrite is tried at: "aten::gelu"
  std::function<bool(ir::Graph& graph, ir::Node& root)> rewrite;
  std::string doc;  // one line
};

// Applies `patterns` to `graph` (Note [plugin rewrite patterns]); returns the number of rewrites.
// Throws InvalidUsage naming the pattern when one rewrites more often than the graph had nodes.
int apply_rewrite_patterns(ir::Graph& graph, std::span<const RewritePattern> patterns);

// The registered patterns, in registration order (drains the queue first; throws InvalidUsage for
// a bad queued pattern, which is then dropped).
std::vector<RewritePattern> registered_rewrite_patterns();

// The pipeline pass: apply_rewrite_patterns with the registered patterns.
void rewrite_patterns(ir::Graph& graph);

namespace detail {
// Queues a registration (never throws); returns a dummy for static initialisation.
int queue_rewrite_pattern(RewritePattern pattern, const char* file, int line) noexcept;
}  // namespace detail

}  // namespace symmflow::passes

#define SYMMFLOW_REWRITE_CONCAT_INNER(a, b) a##b
#define SYMMFLOW_REWRITE_CONCAT(a, b) SYMMFLOW_REWRITE_CONCAT_INNER(a, b)

// Registers pattern `ns::name` tried at nodes of `root_op` (a string), rewriting with `fn`
// (bool(ir::Graph&, ir::Node&)); `doc` is one line.
#define SYMMFLOW_REWRITE_PATTERN(ns, name, root_op, fn, doc)                                    \
  static const int SYMMFLOW_REWRITE_CONCAT(symmflow_rewrite_##ns##_##name##_, __LINE__) =       \
      ::symmflow::passes::detail::queue_rewrite_pattern({#ns "::" #name, root_op, fn, doc},     \
                                                        __FILE__, __LINE__)
