// The pass pipeline (DESIGN.md order) and compile(). Contract: compile verifies the input graph,
// runs each graph pass (verifying after each when options.verify_each, by default in debug builds
// only), checks the final schedule for races on peer-accessed memory (check_races, unless
// options.race_check is false), then plans memory.
#include "symmflow/passes/pipeline.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string_view>

#include "symmflow/ir/verify.hpp"
#include "symmflow/passes/check_races.hpp"
#include "symmflow/passes/passes.hpp"
#include "symmflow/passes/plan_memory.hpp"
#include "symmflow/passes/rewrite_patterns.hpp"

namespace symmflow::passes {

const std::vector<PassInfo>& graph_passes() {
  static const std::vector<PassInfo> kPasses = {
      {"verify", [](ir::Graph& g) { ir::verify_or_throw(g); }, "check SSA, types, groups, layouts"},
      {"functionalize", functionalize,
       "in-place and out calls become functional; input mutations become writebacks"},
      {"rewrite_patterns", rewrite_patterns,
       "rewrite patterns registered by plugins (SYMMFLOW_REWRITE_PATTERN), in load order"},
      {"raise_rms_norm", raise_rms_norm,
       "the decompositions of RMSNorm (pow, mean, add, rsqrt, mul, casts) become aten::rms_norm",
       true},
      {"raise_rotary", raise_rotary,
       "the rotary embedding's decomposition (slices, neg, cat, products, sum) becomes "
       "fused::rotary_embedding",
       true},
      {"raise_gqa", raise_gqa,
       "key/value heads repeated for attention (repeat_kv) are read in place with enable_gqa",
       true},
      {"fuse_allreduce_rmsnorm", fuse_allreduce_rmsnorm,
       "all-reduce -> residual add -> rms_norm becomes symm_mem::fused_all_reduce_add_rms_norm",
       true},
      {"decompose_collective_matmul", decompose_collective_matmul,
       "all-gather -> matmuls and matmul -> reduce-scatter (sequence parallelism) become "
       "symm_mem::fused_all_gather_matmul / fused_matmul_reduce_scatter",
       true},
      {"fuse_pointwise", fuse_pointwise, "chains of elementwise ops become one fused node", true},
      {"realize_symm_mem", realize_symm_mem,
       "place symm args in symmetric memory, copies only where needed"},
      {"lower_out_variants", lower_out_variants,
       "run ops through their out variants into planned buffers"},
      {"schedule", schedule, "order nodes: data, mutation and per-group communication order"},
      {"reinplace", reinplace, "restore in-place updates where the old value is dead"},
  };
  return kPasses;
}

void run_pass(const std::string& name, ir::Graph& graph) {
  std::vector<std::string> names;
  for (const PassInfo& p : graph_passes()) {
    if (p.name == name) {
      p.run(graph);
      return;
    }
    names.push_back(p.name);
  }
  invalid_usage("unknown pass '{}' (passes: {})", name, fmt::join(names, ", "));
}

namespace {
// Debug and sanitizer builds check every pass's output; release builds check the input only.
#if !defined(NDEBUG) || defined(SYMMFLOW_ASAN) || defined(SYMMFLOW_TSAN)
constexpr bool kVerifyEachByDefault = true;
#else
constexpr bool kVerifyEachByDefault = false;
#endif

// Note [skipping fusions]
// The fusions (raise_rms_norm, raise_rotary, raise_gqa, fuse_allreduce_rmsnorm,
// decompose_collective_matmul, fuse_pointwise) only make a plan faster: it computes the same
// without them. Naming them in CompileOptions::skip_passes or in SYMMFLOW_SKIP_PASSES turns them
// off, so a benchmark can show what each one is worth in the same run, and a suspected fusion bug
// can be ruled out without a rebuild. The other passes make the plan correct and cannot be
// skipped.
std::set<std::string> skipped_passes(const CompileOptions& options) {
  std::vector<std::string> names = options.skip_passes;
  if (const char* env = std::getenv("SYMMFLOW_SKIP_PASSES")) {
    std::string_view rest = env;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      std::string_view name = rest.substr(0, comma);
      if (!name.empty()) names.emplace_back(name);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  std::vector<std::string> optional;
  for (const PassInfo& p : graph_passes())
    if (p.optional) optional.push_back(p.name);
  for (const std::string& name : names) {
    SF_CHECK(std::find(optional.begin(), optional.end(), name) != optional.end(),
             "pass '{}' cannot be skipped (SYMMFLOW_SKIP_PASSES / skip_passes take: {})", name,
             fmt::join(optional, ", "));
  }
  return {names.begin(), names.end()};
}

}  // namespace

std::shared_ptr<const Plan> compile(std::unique_ptr<ir::Graph> graph,
                                    const CompileOptions& options) {
  const bool verify_each = options.verify_each.value_or(kVerifyEachByDefault);
  const std::set<std::string> skipped = skipped_passes(options);
  ir::verify_or_throw(*graph);
  for (const PassInfo& p : graph_passes()) {
    if (p.name == "verify" || skipped.count(p.name)) continue;
    p.run(*graph);
    if (verify_each) ir::verify_or_throw(*graph, "<after " + p.name + ">");
    if (options.after_pass) options.after_pass(p.name, *graph);
  }
  // After schedule and reinplace: the step order and the buffers the plan will have.
  if (options.race_check) check_races(*graph, options.filename, options.source);
  std::shared_ptr<ir::Graph> shared(std::move(graph));
  return emit_plan(shared, plan_memory(*shared));
}

}  // namespace symmflow::passes
