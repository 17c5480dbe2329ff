// The text format of graphs. Printing and parsing are a fixed point: print(parse(print(g))) ==
// print(g).
//
//   # comments run to the end of the line
//   group tp                      # a group of every rank; `group tp(2)`: blocks of 2 ranks
//   group dp = {0, 2}, {1, 3}     # listed subgroups (docs/ir.md, Note [explicit groups])
//   graph tp_mlp(x: bf16[16, 4096], w0: bf16[4096, 4096]) {
//     h0 = aten::mm(x, w0)
//     r0 = symm_mem::one_shot_all_reduce(h0, "sum", "tp")
//     y = aten::add.Tensor(r0, h0, alpha=2)              # keyword arguments
//     symm_mem::two_shot_all_reduce_(y, "sum", "tp")      # no results
//     a, b = symm_mem::fused_all_reduce_add_rms_norm(...) # several results
//     y1 = functional<symm_mem::two_shot_all_reduce_>(y, "sum", "tp")   # made by functionalize
//     c = copy(x) {reason = "graph input x feeds ..."}    # a copy the compiler added
//     f = fused(x) {                                      # a fused pointwise region
//       t = aten::sin(x)
//       return t
//     }
//     return r0
//   }
//
// Values may carry their layout: `h0 = aten::mm(x, w0) @ symm[tp]`, `x: f32[8] @ regular`, and
// `@ (regular, symm[tp])` for several results. An op name without overload picks the first
// overload whose schema accepts the arguments. Literals: ints, floats, "strings", True, False,
// None, lists `[1, 2]`, dtypes (`f32`, `bf16`, ...) where a ScalarType is expected; `rank+1`,
// `rank-1` for rank-relative ints (Note [rank-relative arguments] in graph.hpp).
#pragma once

#include <memory>
#include <string>

#include "symmflow/ir/graph.hpp"

namespace symmflow::ir {

struct ParseOptions {
  std::string filename = "<input>";
  int world_size = 1;  // sizes the groups for shape functions
  // Note [parser limits] (parser.cpp): the most diagnostics reported before one
  // "too many errors" line ends the list, and the deepest nesting of fused regions.
  size_t max_diagnostics = 20;
  int max_nesting = 64;
};

// Parses a graph; every error found (at most options.max_diagnostics, then "too many errors; ...")
// is collected and thrown as one DiagnosticError whose messages point at line and column. Linear
// in the size of the text; never recurses deeper than options.max_nesting fused regions.
std::unique_ptr<Graph> parse_graph(const std::string& text, const ParseOptions& options = {});
std::string print_graph(const Graph& graph);
// A literal as the text format writes it ("sum" -> "\"sum\"", 2.0 -> "2.0").
std::string print_literal(const symmflow::Value& v);
// A value name the parser reads back as that name for `hint` (a builder's caller may hint any
// text): characters outside [A-Za-z0-9_] become '_', a leading digit or an empty hint gets "v_",
// and a word the parser reads otherwise (True, None, rank, graph, functional, a dtype name, ...)
// gets a trailing '_'.
std::string safe_value_name(std::string_view hint);

}  // namespace symmflow::ir
