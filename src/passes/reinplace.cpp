// reinplace: not implemented yet (placeholder so the pipeline links).
#include "symmflow/passes/passes.hpp"

namespace symmflow::passes {

void reinplace(ir::Graph& graph) {
  (void)graph;
  invalid_usage("pass 'reinplace' is not implemented yet");
}

}  // namespace symmflow::passes
