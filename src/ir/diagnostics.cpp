// Formatting of compiler diagnostics with the offending source line and a caret; the contract is
// in symmflow/ir/diagnostics.hpp.
#include "symmflow/ir/diagnostics.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace symmflow::ir {

namespace {

// Note [escaped diagnostics]: diagnostics go to terminals and logs, so a byte of the input that
// is a control character or not valid UTF-8 is never echoed raw (it could reset the terminal or
// make the log invalid UTF-8): it is written `\xHH`. A valid UTF-8 sequence of 2 to 4 bytes (a
// comment in another script, say) is kept as it is. The caret under an echoed line counts one
// column per shown character, so it stays under the right place after escaping.

// Length of the valid UTF-8 sequence starting at s[i] (2 to 4), or 0 when there is none.
size_t utf8_sequence(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  unsigned char c1 = byte(i + 1);
  if (c == 0xE0 && c1 < 0xA0) return 0;  // overlong
  if (c == 0xED && c1 > 0x9F) return 0;  // surrogates
  if (c == 0xF0 && c1 < 0x90) return 0;  // overlong
  if (c == 0xF4 && c1 > 0x8F) return 0;  // above U+10FFFF
  return n;
}

// Appends the escaped form of `s` to `out`; returns the number of characters shown.
size_t append_escaped(std::string& out, std::string_view s, bool keep_newlines) {
  size_t shown = 0;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c >= 0x20 && c < 0x7F) || (c == '\n' && keep_newlines)) {
      out += char(c);
      ++i;
      ++shown;
    } else if (size_t n = c >= 0x80 ? utf8_sequence(s, i) : 0; n > 0) {
      out.append(s.substr(i, n));
      i += n;
      ++shown;
    } else {
      out += fmt::format("\\x{:02x}", c);
      ++i;
      shown += 4;
    }
  }
  return shown;
}

// Offsets of the first byte of each line (index 0 is line 1).
std::vector<size_t> line_starts(const std::string& source) {
  std::vector<size_t> starts{0};
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\n') starts.push_back(i + 1);
  }
  return starts;
}

// The echoed source line and caret for `loc`, or "" when the line is empty or out of range.
std::string echo_line(const std::string& source, const std::vector<size_t>& starts, SourceLoc loc) {
  if (loc.line < 1 || size_t(loc.line) > starts.size()) return "";
  size_t begin = starts[size_t(loc.line) - 1];
  size_t end = size_t(loc.line) < starts.size() ? starts[size_t(loc.line)] - 1 : source.size();
  if (end > begin && source[end - 1] == '\r') --end;
  std::string_view text(source.data() + begin, end - begin);
  if (text.empty()) return "";
  size_t at = std::min(size_t(std::max(loc.column - 1, 0)), text.size());
  std::string shown = "  ";
  size_t caret = 0;
  if (text.size() > kMaxEchoedLine) {  // a window around the column
    size_t from = at > kMaxEchoedLine / 2 ? at - kMaxEchoedLine / 2 : 0;
    size_t to = std::min(text.size(), from + kMaxEchoedLine);
    if (from > 0) caret += append_escaped(shown, "...", false);
    caret += append_escaped(shown, text.substr(from, at - from), false);
    append_escaped(shown, text.substr(at, to - at), false);
    if (to < text.size()) shown += "...";
  } else {
    caret = append_escaped(shown, text.substr(0, at), false);
    append_escaped(shown, text.substr(at), false);
  }
  return fmt::format("\n{}\n  {}^", shown, std::string(caret, ' '));
}

}  // namespace

std::string escape_bytes(std::string_view text, bool keep_newlines) {
  std::string out;
  append_escaped(out, text, keep_newlines);
  return out;
}

std::string format_diagnostics(const std::vector<Diagnostic>& diagnostics,
                               const std::string& filename, const std::string& source) {
  std::vector<size_t> starts;
  if (!source.empty() && !diagnostics.empty()) starts = line_starts(source);
  std::string out;
  for (const Diagnostic& d : diagnostics) {
    if (!out.empty()) out += "\n";
    std::string message = escape_bytes(d.message, true);
    if (d.loc.line > 0) {
      out += fmt::format("{}:{}:{}: error: {}", filename, d.loc.line, d.loc.column, message);
      if (!starts.empty()) out += echo_line(source, starts, d.loc);
    } else {
      out += fmt::format("{}: error: {}", filename, message);
    }
  }
  return out;
}

DiagnosticError::DiagnosticError(std::vector<Diagnostic> diagnostics, const std::string& filename,
                                 const std::string& source)
    : Error(ErrorCode::InvalidUsage, format_diagnostics(diagnostics, filename, source)),
      diagnostics_(std::move(diagnostics)) {}

}  // namespace symmflow::ir
