// The verifier. Checks, for a graph and its fused bodies: SSA (each value defined once, before
// its uses), use lists, types (each op's outputs equal what its shape function gives for its
// current arguments), groups (every group argument names a declared group), layouts (a symm
// argument with an assigned layout is in symm[its group]; a value in symm[g] names a declared
// group). Returns one diagnostic per problem, pointing at the node's source line when it has one.
#pragma once

#include <vector>

#include "symmflow/ir/graph.hpp"

namespace symmflow::ir {

std::vector<Diagnostic> verify_graph(const Graph& graph);
// Throws DiagnosticError when verify_graph finds anything.
void verify_or_throw(const Graph& graph, const std::string& filename = "<graph>",
                     const std::string& source = "");

}  // namespace symmflow::ir
