// realize_symm_mem: not implemented yet (placeholder so the pipeline links).
#include "symmflow/passes/passes.hpp"

namespace symmflow::passes {

void realize_symm_mem(ir::Graph& graph) {
  (void)graph;
  invalid_usage("pass 'realize_symm_mem' is not implemented yet");
}

}  // namespace symmflow::passes
