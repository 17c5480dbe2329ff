// functionalize: not implemented yet (placeholder so the pipeline links).
#include "symmflow/passes/passes.hpp"

namespace symmflow::passes {

void functionalize(ir::Graph& graph) {
  (void)graph;
  invalid_usage("pass 'functionalize' is not implemented yet");
}

}  // namespace symmflow::passes
