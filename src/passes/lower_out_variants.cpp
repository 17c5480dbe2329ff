// lower_out_variants: not implemented yet (placeholder so the pipeline links).
#include "symmflow/passes/passes.hpp"

namespace symmflow::passes {

void lower_out_variants(ir::Graph& graph) {
  (void)graph;
  invalid_usage("pass 'lower_out_variants' is not implemented yet");
}

}  // namespace symmflow::passes
