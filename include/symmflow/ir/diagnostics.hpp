// Compiler diagnostics: a message with a source location in the text IR, collected rather than
// thrown one by one. DiagnosticError carries all of them; its what() prints each as
//   file:line:col: error: message
//     <source line>
//     ^
// Guarantees: rendering is linear in the source size plus the output (the source is indexed by
// line once); bytes that are not printable ASCII or valid UTF-8 are shown as `\xHH` in messages
// and in echoed source lines, never raw (Note [escaped diagnostics] in diagnostics.cpp); echoed
// lines longer than kMaxEchoedLine bytes are cut to a window around the column.
#pragma once

#include <string>
#include <string_view>
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

// The longest source line echoed whole under a diagnostic.
inline constexpr size_t kMaxEchoedLine = 160;

// Formats diagnostics against the source text (source may be empty).
std::string format_diagnostics(const std::vector<Diagnostic>& diagnostics,
                               const std::string& filename, const std::string& source);

// `text` with every byte that is not printable ASCII or part of a valid UTF-8 sequence written
// as `\xHH` (`\x07`, `\xff`); '\n' is kept when keep_newlines.
std::string escape_bytes(std::string_view text, bool keep_newlines = false);

}  // namespace symmflow::ir
