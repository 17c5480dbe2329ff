// schedule: not implemented yet (placeholder so the pipeline links).
#include "symmflow/passes/passes.hpp"

namespace symmflow::passes {

void schedule(ir::Graph& graph) {
  (void)graph;
  invalid_usage("pass 'schedule' is not implemented yet");
}

}  // namespace symmflow::passes
