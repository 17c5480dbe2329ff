// emit_plan: not implemented yet (placeholder so the pipeline links).
#include "symmflow/passes/plan_memory.hpp"

namespace symmflow::passes {

std::shared_ptr<const Plan> emit_plan(std::shared_ptr<ir::Graph> graph, MemoryPlan memory) {
  (void)graph;
  (void)memory;
  invalid_usage("pass 'emit_plan' is not implemented yet");
}

std::string Plan::str() const { return ""; }

}  // namespace symmflow::passes
