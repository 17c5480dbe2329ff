// The lexer of the text format; the contract is in lexer.hpp.
#include "ir/lexer.hpp"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string_view>

#include <fmt/format.h>

namespace symmflow::ir::text_lexer {

namespace {

size_t ident_end(const std::string& src, size_t from) {
  size_t j = from;
  while (j < src.size() && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_')) ++j;
  return j;
}

// Note [non-finite literals]: `inf`, `-inf` and `nan` are float literals (a mask's -inf, an fmin's
// nan), written as the printer writes them; safe_value_name keeps values off these words. The
// length of such a literal at `i`, or 0.
size_t nonfinite_length(const std::string& src, size_t i) {
  const bool minus = src[i] == '-';
  const size_t word = minus ? i + 1 : i, end = ident_end(src, word);
  const std::string_view w = std::string_view(src).substr(word, end - word);
  return (w == "inf" || (!minus && w == "nan")) ? end - i : 0;
}

}  // namespace

namespace {
constexpr size_t kMaxBytesShown = 16;  // of a run of unexpected bytes

// Note [NUL bytes]: a text with NUL bytes is most likely a binary file or UTF-16: one error at the
// first NUL says so, and the lexer then skips every NUL like a space (one error per NUL byte
// buried the file's real problems, if any, under thousands of identical lines).
std::optional<Diagnostic> nul_bytes(const std::string& src) {
  const size_t first = src.find('\0');
  if (first == std::string::npos) return std::nullopt;
  const size_t line_start = src.rfind('\n', first);
  const int line = 1 + int(std::count(src.begin(), src.begin() + long(first), '\n'));
  const int col = int(first - (line_start == std::string::npos ? 0 : line_start + 1)) + 1;
  const auto n = std::count(src.begin(), src.end(), '\0');
  return Diagnostic{{line, col},
                    fmt::format("unexpected NUL byte{} ({} in the text, the first here): symmflow "
                                "reads UTF-8 text; is this a binary or UTF-16 file?",
                                n > 1 ? "s" : "", n)};
}
}  // namespace

LexResult lex(const std::string& src, std::vector<Diagnostic>& diags, size_t max_diagnostics) {
  LexResult result;
  std::vector<Token>& out = result.tokens;
  auto report = [&](SourceLoc loc, std::string message) {
    if (diags.size() >= max_diagnostics) {
      result.too_many_errors = true;
      return false;
    }
    diags.push_back({loc, std::move(message)});
    return true;
  };
  if (std::optional<Diagnostic> nul = nul_bytes(src)) report(nul->loc, nul->message);
  int line = 1, col = 1;
  size_t i = 0;
  auto advance = [&](size_t n) {
    for (size_t k = 0; k < n; ++k, ++i) {
      if (src[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
  };
  while (i < src.size()) {
    char c = src[i];
    if (std::isspace(static_cast<unsigned char>(c)) || c == '\0') {  // Note [NUL bytes]
      advance(1);
      continue;
    }
    if (c == '#') {
      while (i < src.size() && src[i] != '\n') advance(1);
      continue;
    }
    Token t;
    t.loc = {line, col};
    size_t start = i;
    if (size_t literal = nonfinite_length(src, i)) {
      advance(literal);
      t.kind = Tok::floating;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      advance(ident_end(src, i) - i);
      t.kind = Tok::ident;
    } else if (std::isdigit(static_cast<unsigned char>(c)) ||
               ((c == '-' || c == '.') && i + 1 < src.size() &&
                std::isdigit(static_cast<unsigned char>(src[i + 1])))) {
      advance(1);
      bool is_float = c == '.';
      while (i < src.size()) {
        char d = src[i];
        if (std::isdigit(static_cast<unsigned char>(d))) {
          advance(1);
        } else if (d == '.' || d == 'e' || d == 'E') {
          is_float = true;
          advance(1);
          if ((d == 'e' || d == 'E') && i < src.size() && (src[i] == '-' || src[i] == '+'))
            advance(1);
        } else {
          break;
        }
      }
      t.kind = is_float ? Tok::floating : Tok::integer;
    } else if (c == '"') {
      advance(1);
      std::string s;
      bool closed = false;
      while (i < src.size() && src[i] != '\n') {
        if (src[i] == '\\' && i + 1 < src.size()) {
          s += src[i + 1] == 'n' ? '\n' : src[i + 1];
          advance(2);
        } else if (src[i] == '"') {
          advance(1);
          closed = true;
          break;
        } else {
          s += src[i];
          advance(1);
        }
      }
      if (!closed && !report(t.loc, "unterminated string")) break;
      t.kind = Tok::string;
      t.text = s;
      out.push_back(t);
      continue;
    } else if (c == ':' && i + 1 < src.size() && src[i + 1] == ':') {
      advance(2);
      t.kind = Tok::punct;
    } else if (std::string_view("(){}[],=:@<>.+").find(c) != std::string_view::npos) {
      advance(1);
      t.kind = Tok::punct;
    } else {
      size_t n = 1;
      while (static_cast<unsigned char>(c) >= 0x80 && i + n < src.size() &&
             static_cast<unsigned char>(src[i + n]) >= 0x80)
        ++n;
      std::string_view bytes(src.data() + i, std::min(n, kMaxBytesShown));
      if (!report(t.loc, fmt::format("unexpected character{} '{}{}'", n > 1 ? "s" : "",
                                     escape_bytes(bytes), n > kMaxBytesShown ? "..." : "")))
        break;
      advance(n);
      continue;
    }
    t.text = src.substr(start, i - start);
    out.push_back(t);
  }
  Token end;
  end.loc = {line, col};
  out.push_back(end);
  return result;
}

}  // namespace symmflow::ir::text_lexer
