// fuse_pointwise: not implemented yet (placeholder so the pipeline links).
#include "symmflow/passes/passes.hpp"

namespace symmflow::passes {

void fuse_pointwise(ir::Graph& graph) {
  (void)graph;
  invalid_usage("pass 'fuse_pointwise' is not implemented yet");
}

bool is_fusible_pointwise(const OpDef& op) {
  (void)op;
  return false;
}

}  // namespace symmflow::passes
