// libFuzzer target for the IR text parser, the verifier and the compile pipeline. The first byte
// picks the world size (1 + byte % 8); the rest is parsed as a program. Contract checked on every
// input:
//   - parse_graph either returns a graph or throws ir::DiagnosticError, whose diagnostics number
//     at most ParseOptions::max_diagnostics + 1 (the "too many errors" line) and whose text has no
//     raw control byte but '\n' (Note [escaped diagnostics]);
//   - a parsed graph that verifies prints to a text that parses back and prints identically;
//   - passes::compile of a verified graph returns a plan or throws symmflow::Error.
// Any other exception, a crash, a sanitizer report, a hang or an OOM is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "symmflow/core/error.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/ir/verify.hpp"
#include "symmflow/passes/pipeline.hpp"

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "ir_fuzz: %s\n  detail: %s\n", what, detail.c_str());
  std::abort();
}

void check_rendered(const symmflow::ir::DiagnosticError& e, size_t max_diagnostics) {
  if (e.diagnostics().size() > max_diagnostics + 1) fail("too many diagnostics", e.what());
  for (const char* c = e.what(); *c; ++c) {
    auto b = static_cast<unsigned char>(*c);
    if ((b < 0x20 && b != '\n') || b == 0x7F) fail("raw control byte in a diagnostic", e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  symmflow::ir::ParseOptions options;
  options.filename = "fuzz.sf";
  options.world_size = 1 + data[0] % 8;
  std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::unique_ptr<symmflow::ir::Graph> graph;
  try {
    graph = symmflow::ir::parse_graph(text, options);
  } catch (const symmflow::ir::DiagnosticError& e) {
    check_rendered(e, options.max_diagnostics);
    return 0;
  }
  if (!symmflow::ir::verify_graph(*graph).empty()) return 0;
  std::string printed = symmflow::ir::print_graph(*graph);
  try {
    std::string reprinted = symmflow::ir::print_graph(*symmflow::ir::parse_graph(printed, options));
    if (reprinted != printed) fail("print is not a fixed point", printed + "\n---\n" + reprinted);
  } catch (const symmflow::Error& e) {
    fail("printed graph does not parse", printed + "\n---\n" + e.what());
  }
  try {
    (void)symmflow::passes::compile(std::move(graph));
  } catch (const symmflow::Error&) {
    // a refusal with a message is a correct answer
  } catch (const std::exception& e) {
    fail("compile threw something other than symmflow::Error", e.what());
  }
  return 0;
}
