// Formatting of compiler diagnostics with the offending source line and a caret.
#include "symmflow/ir/diagnostics.hpp"

#include <sstream>

#include <fmt/format.h>

namespace symmflow::ir {

namespace {
std::string source_line(const std::string& source, int line) {
  std::istringstream in(source);
  std::string text;
  for (int i = 1; std::getline(in, text); ++i) {
    if (i == line) return text;
  }
  return "";
}
}  // namespace

std::string format_diagnostics(const std::vector<Diagnostic>& diagnostics,
                               const std::string& filename, const std::string& source) {
  std::string out;
  for (const Diagnostic& d : diagnostics) {
    if (!out.empty()) out += "\n";
    if (d.loc.line > 0) {
      out += fmt::format("{}:{}:{}: error: {}", filename, d.loc.line, d.loc.column, d.message);
      std::string text = source_line(source, d.loc.line);
      if (!text.empty()) {
        out += fmt::format("\n  {}\n  {}^", text, std::string(size_t(std::max(d.loc.column - 1, 0)), ' '));
      }
    } else {
      out += fmt::format("{}: error: {}", filename, d.message);
    }
  }
  return out;
}

DiagnosticError::DiagnosticError(std::vector<Diagnostic> diagnostics, const std::string& filename,
                                 const std::string& source)
    : Error(ErrorCode::InvalidUsage, format_diagnostics(diagnostics, filename, source)),
      diagnostics_(std::move(diagnostics)) {}

}  // namespace symmflow::ir
