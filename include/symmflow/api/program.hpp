// The front door, part 1: programs, plugins and compilation (symmflow.hpp shows the whole API).
//
// A Program is source text in the text format (ir/text.hpp) that parsed and verified; it keeps
// its file name so that every later diagnostic (verifier, passes) points at file:line:col.
// compile() runs the pass pipeline and the memory planner and returns a CompiledProgram: the
// plan, the diagnostics, and what `symmflow explain` shows as a plain struct (explain.hpp) and as
// JSON. Expects: plugins loaded before the programs that use their ops are parsed. Guarantees:
// bad input is a symmflow::Error (ProgramError with every diagnostic for a program that does not
// parse, verify or compile), never an assert. Refuses: world sizes below 1, unknown pass names.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "symmflow/core/error.hpp"
#include "symmflow/core/tensor.hpp"

namespace symmflow {
namespace ir {
class Graph;
}
namespace passes {
struct Plan;
}
}  // namespace symmflow

namespace symmflow::api {

struct ExplainData;  // explain.hpp

// One problem found in a program, at a 1-based line and column of `file` (0: no location).
struct Diagnostic {
  std::string file;
  int line = 0;
  int column = 0;
  std::string message;
};

// A program that does not parse, verify or compile. what() prints every diagnostic as
// "file:line:col: error: message", the source line and a caret under the column.
class ProgramError : public Error {
 public:
  ProgramError(std::vector<Diagnostic> diagnostics, const std::string& formatted);
  const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }

 private:
  std::vector<Diagnostic> diagnostics_;
};

// The name, dtype and shape of a program input or output.
struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
};

struct ParseOptions {
  std::string filename = "<input>";  // diagnostics name it
  int world_size = 1;                // sizes the groups for shape functions
};

class Program {
 public:
  // Parses and verifies `text`; throws ProgramError with every diagnostic.
  static Program parse(const std::string& text, const ParseOptions& options = {});
  // The same for a file (InvalidUsage "cannot read 'path'" when it cannot be read).
  static Program parse_file(const std::string& path, int world_size = 1);
  // A program built in memory with the IR builder (symmflow/ir/graph.hpp); verified.
  static Program from_graph(const ir::Graph& graph, int world_size = 1);

  const std::string& name() const;
  const std::string& text() const { return text_; }
  const std::string& filename() const { return filename_; }
  int world_size() const { return world_size_; }
  std::vector<TensorSpec> inputs() const;
  std::vector<TensorSpec> outputs() const;
  // The same source parsed for another world size (groups resized).
  Program with_world_size(int world_size) const;
  // Runs the named graph passes in order, verifying after each, and prints the resulting IR.
  std::string print_after_passes(const std::vector<std::string>& passes) const;
  // The eager interpreter on this program: the reference results for `inputs` (collective when
  // the program communicates: call it on every rank).
  std::vector<Tensor> interpret(std::vector<Tensor> inputs) const;
  const ir::Graph& graph() const { return *graph_; }

 private:
  Program() = default;
  std::string text_, filename_;
  int world_size_ = 1;
  std::shared_ptr<const ir::Graph> graph_;
};

// Parses without throwing for bad programs: the program, or the diagnostics and their text.
struct ParseResult {
  std::optional<Program> program;
  std::vector<Diagnostic> diagnostics;
  std::string message;  // the diagnostics formatted as ProgramError::what() prints them
};
ParseResult try_parse(const std::string& text, const ParseOptions& options = {});

// Loads a plugin shared library (its ops register on load); InvalidUsage naming the path.
void load_plugin(const std::string& path);
void load_plugins(const std::vector<std::string>& paths);

// The pass names print_after accepts, in pipeline order (graph passes, then "plan_memory").
std::vector<std::string> pass_names();

struct CompileOptions {
  std::optional<int> world_size;   // unset: the program's
  std::optional<bool> verify_each; // unset: on in debug builds of the library only
  // Refuse programs whose peer accesses of symmetric memory may race (docs/races.md).
  bool race_check = true;
  // Keep the IR printed after these passes (pass_names(), or "all"): CompiledProgram::printed_after.
  std::vector<std::string> print_after;
  // The device the plan is for: "cpu", or "cuda"/"cuda:i", whose backend module is loaded first
  // (the passes choose among the kernels registered when they run). No GPU is needed.
  std::string device = "cpu";
  // The host of each rank (Note [hosts] in runtime/bootstrap.hpp), for explain: a collective of a
  // group that spans hosts says how it runs there. Empty: the hosts of the world of the calling
  // rank when it has the program's world size, else one host.
  std::vector<int> hosts;
};

class CompiledProgram {
 public:
  const Program& source() const { return *source_; }
  int world_size() const { return source_->world_size(); }
  // The plan printed like a program, and the optimised graph.
  std::string plan_text() const;
  std::string ir_text() const;
  // (pass, IR after it) for CompileOptions::print_after, in pipeline order.
  const std::vector<std::pair<std::string, std::string>>& printed_after() const { return printed_; }
  // Problems found that did not stop compilation (none today: errors throw ProgramError).
  const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }
  const ExplainData& explain() const { return *explain_; }
  std::string explain_json() const;
  // The plan itself, for the exec layer (passes/plan.hpp).
  const std::shared_ptr<const passes::Plan>& plan() const { return plan_; }

 private:
  friend CompiledProgram compile(const Program&, const CompileOptions&);
  CompiledProgram() = default;  // made by compile() only
  std::shared_ptr<const Program> source_;
  std::shared_ptr<const passes::Plan> plan_;
  std::shared_ptr<const ExplainData> explain_;
  std::vector<std::pair<std::string, std::string>> printed_;
  std::vector<Diagnostic> diagnostics_;
};

CompiledProgram compile(const Program& program, const CompileOptions& options = {});

// Compares output `i` of `program` (got) with the reference (want) within the tolerance of its
// dtype and rounding depth (exec/compare.hpp). `context` ends the label ("of iteration 0 on
// rank 1"): mismatches read "output i ('name', d rounding ops deep) <context>: ...".
struct OutputComparison {
  std::optional<std::string> mismatch;  // the first bad element, described
  double worst = 0;                     // the largest error as a fraction of the tolerance
};
OutputComparison compare_output(const Program& program, size_t i, const Tensor& got,
                                const Tensor& want, const std::string& context);

// The graph inputs that a run of `compiled` changes, in input order: those the source program
// writes in place and those the plan writes back (src/api/check.cpp).
std::vector<size_t> mutated_inputs(const CompiledProgram& compiled);
// Compares graph input `i`'s contents after a compiled run (got) with its contents after the
// interpreter's run (want), as compare_output does; mismatches read "input i ('name', mutated, d
// rounding ops deep) <context>: ...".
OutputComparison compare_mutated_input(const CompiledProgram& compiled, size_t i,
                                       const Tensor& got, const Tensor& want,
                                       const std::string& context);

}  // namespace symmflow::api
