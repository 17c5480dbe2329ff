// Programs, plugins and compilation (symmflow/api/program.hpp). Every diagnostic of the IR layer
// (parser, verifier, passes) leaves the api as a ProgramError naming the program's file.
#include <algorithm>
#include <fstream>
#include <sstream>

#include "api/explain_internal.hpp"
#include "symmflow/api/explain.hpp"
#include "symmflow/api/program.hpp"
#include "symmflow/exec/compare.hpp"
#include "symmflow/exec/device_module.hpp"
#include "symmflow/exec/interpret.hpp"
#include "symmflow/ir/diagnostics.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/ir/verify.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow::api {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  SF_CHECK(in.good(), "cannot read '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ProgramError program_error(const ir::DiagnosticError& e, const std::string& file) {
  std::vector<Diagnostic> out;
  for (const ir::Diagnostic& d : e.diagnostics())
    out.push_back({file, d.loc.line, d.loc.column, d.message});
  return ProgramError(std::move(out), e.what());
}

// Parses and verifies `text` (the IR layer's DiagnosticError becomes a ProgramError).
std::shared_ptr<const ir::Graph> parse_verified(const std::string& text, const std::string& file,
                                               int world_size) {
  SF_CHECK(world_size >= 1, "--ranks must be at least 1 (got {})", world_size);
  try {
    std::unique_ptr<ir::Graph> g = ir::parse_graph(text, {file, world_size});
    ir::verify_or_throw(*g, file, text);
    return g;
  } catch (const ir::DiagnosticError& e) {
    throw program_error(e, file);
  }
}

std::vector<TensorSpec> specs_of(const std::vector<ir::Value*>& values) {
  std::vector<TensorSpec> out;
  for (const ir::Value* v : values) out.push_back({v->name(), v->type().dtype, v->type().shape});
  return out;
}

}  // namespace

ProgramError::ProgramError(std::vector<Diagnostic> diagnostics, const std::string& formatted)
    : Error(ErrorCode::InvalidUsage, formatted), diagnostics_(std::move(diagnostics)) {}

Program Program::parse(const std::string& text, const ParseOptions& options) {
  Program p;
  p.graph_ = parse_verified(text, options.filename, options.world_size);
  p.text_ = text;
  p.filename_ = options.filename;
  p.world_size_ = options.world_size;
  return p;
}

Program Program::parse_file(const std::string& path, int world_size) {
  SF_CHECK(world_size >= 1, "--ranks must be at least 1 (got {})", world_size);
  return parse(read_file(path), {path, world_size});
}

Program Program::from_graph(const ir::Graph& graph, int world_size) {
  return parse(ir::print_graph(graph), {"<graph " + graph.name() + ">", world_size});
}

const std::string& Program::name() const { return graph_->name(); }
std::vector<TensorSpec> Program::inputs() const { return specs_of(graph_->inputs()); }
std::vector<TensorSpec> Program::outputs() const { return specs_of(graph_->outputs()); }

Program Program::with_world_size(int world_size) const {
  if (world_size == world_size_) return *this;
  return parse(text_, {filename_, world_size});
}

std::string Program::print_after_passes(const std::vector<std::string>& passes) const {
  try {
    std::unique_ptr<ir::Graph> g = ir::parse_graph(text_, {filename_, world_size_});
    for (const std::string& p : passes) {
      passes::run_pass(p, *g);
      ir::verify_or_throw(*g, filename_ + " (after " + p + ")", "");
    }
    return ir::print_graph(*g);
  } catch (const ir::DiagnosticError& e) {
    throw program_error(e, filename_);
  }
}

std::vector<Tensor> Program::interpret(std::vector<Tensor> inputs) const {
  return exec::interpret(*graph_, std::move(inputs));
}

ParseResult try_parse(const std::string& text, const ParseOptions& options) {
  try {
    return {Program::parse(text, options), {}, {}};
  } catch (const ProgramError& e) {
    return {std::nullopt, e.diagnostics(), e.what()};
  } catch (const Error& e) {  // a world size below 1
    return {std::nullopt, {{options.filename, 0, 0, e.what()}}, e.what()};
  }
}

void load_plugin(const std::string& path) { symmflow::load_plugin(path); }

void load_plugins(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) symmflow::load_plugin(p);
}

std::vector<std::string> pass_names() {
  std::vector<std::string> names;
  for (const passes::PassInfo& p : passes::graph_passes()) names.push_back(p.name);
  names.push_back("plan_memory");
  return names;
}

namespace {
// Note [hosts]: the options' hosts, else those of the calling rank's world of this size.
std::vector<int> hosts_for(const CompileOptions& options, int world_size) {
  if (!options.hosts.empty()) return options.hosts;
  const Runtime* rt = Runtime::current_or_null();
  // Compiling waits for no peer: hosts not all known yet (the store meets peers lazily) are left
  // out of explain, not waited for.
  if (!rt || rt->world_size() != world_size || !rt->bootstrap().met_everyone()) return {};
  std::vector<int> hosts;
  bool several = false;
  for (int r = 0; r < world_size; ++r) {
    hosts.push_back(rt->bootstrap().host_of(r));
    several = several || hosts.back() != hosts.front();
  }
  return several ? hosts : std::vector<int>{};
}
}  // namespace

CompiledProgram compile(const Program& program, const CompileOptions& options) {
  if (options.device != "cpu") {  // the target's kernels registered before the passes choose
    SF_CHECK(options.device == "cuda" || options.device.rfind("cuda:", 0) == 0,
             "compile: device 'cpu' or 'cuda' (got '{}')", options.device);
    exec::device_module(DeviceType::cuda, "compile for " + options.device);
  }
  std::vector<std::string> names = pass_names();
  for (const std::string& p : options.print_after) {
    SF_CHECK(p == "all" || std::find(names.begin(), names.end(), p) != names.end(),
             "print_after: unknown pass '{}' (known: {}, all)", p, fmt::join(names, ", "));
  }
  CompiledProgram out;
  out.source_ = std::make_shared<const Program>(
      program.with_world_size(options.world_size.value_or(program.world_size())));
  const Program& src = *out.source_;
  passes::CompileOptions po;
  po.verify_each = options.verify_each;
  po.race_check = options.race_check;
  po.filename = src.filename();
  po.source = src.text();
  auto wanted = [&](const std::string& pass) {
    const std::vector<std::string>& pa = options.print_after;
    return std::find(pa.begin(), pa.end(), pass) != pa.end() ||
           std::find(pa.begin(), pa.end(), "all") != pa.end();
  };
  if (!options.print_after.empty()) {
    po.after_pass = [&](const std::string& pass, const ir::Graph& g) {
      if (wanted(pass)) out.printed_.emplace_back(pass, ir::print_graph(g));
    };
  }
  try {
    // The source once more, with its file's lines, for the pipeline to own.
    std::unique_ptr<ir::Graph> g = ir::parse_graph(src.text(), {src.filename(), src.world_size()});
    g->set_hosts(hosts_for(options, src.world_size()));
    out.plan_ = passes::compile(std::move(g), po);
  } catch (const ir::DiagnosticError& e) {
    throw program_error(e, src.filename());
  }
  out.explain_ = std::make_shared<const ExplainData>(make_explain(*out.plan_, src.world_size()));
  return out;
}

std::string CompiledProgram::plan_text() const { return plan_->str(); }
std::string CompiledProgram::ir_text() const { return ir::print_graph(*plan_->graph); }
std::string CompiledProgram::explain_json() const { return to_json(*explain_); }

OutputComparison compare_output(const Program& program, size_t i, const Tensor& got,
                                const Tensor& want, const std::string& context) {
  const ir::Graph& g = program.graph();
  SF_CHECK(i < g.outputs().size(), "compare_output: program '{}' has {} outputs, not {}",
           g.name(), g.outputs().size(), i + 1);
  const ir::Value* v = g.outputs()[i];
  int depth = exec::rounding_depth(g, v);
  exec::Comparison c = exec::compare(
      got, want, exec::check_tolerance(want.dtype(), depth),
      fmt::format("output {} ('{}', {} rounding ops deep) {}", i, v->name(), depth, context));
  return {c.mismatch, c.worst};
}

}  // namespace symmflow::api
