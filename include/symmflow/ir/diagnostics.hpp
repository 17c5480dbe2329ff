// Compiler diagnostics: a message with a source location in the text IR, collected rather than
// thrown one by one. DiagnosticError carries all of them; its what() prints each as
//   file:line:col: error: message
//     <source line>
//     ^
#pragma once

#include <string>
#include <vector>

#include "symmflow/core/error.hpp"

namespace symmflow::ir {

struct SourceLoc {
  int line = 0;    // 1-based; 0 when the node was not parsed from text
  int column = 0;  // 1-based
};

struct Diagnostic {
  SourceLoc loc;
  std::string message;
};

class DiagnosticError : public Error {
 public:
  DiagnosticError(std::vector<Diagnostic> diagnostics, const std::string& filename,
                  const std::string& source);
  const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }

 private:
  std::vector<Diagnostic> diagnostics_;
};

// Formats diagnostics against the source text (source may be empty).
std::string format_diagnostics(const std::vector<Diagnostic>& diagnostics,
                               const std::string& filename, const std::string& source);

}  // namespace symmflow::ir
