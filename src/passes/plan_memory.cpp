// plan_memory: not implemented yet (placeholder so the pipeline links).
#include "symmflow/passes/plan_memory.hpp"

namespace symmflow::passes {

MemoryPlan plan_memory(const ir::Graph& graph) {
  (void)graph;
  invalid_usage("pass 'plan_memory' is not implemented yet");
}

}  // namespace symmflow::passes
