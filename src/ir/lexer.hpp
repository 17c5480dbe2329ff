// The lexer of the text format (see symmflow/ir/text.hpp): source text to tokens for parser.cpp.
//
// Expects: any text. Guarantees: tokens in source order, each with its 1-based line and column,
//   ending with one Tok::end token; `#` starts a comment to the end of the line; a string token's
//   text is unquoted with `\n` and `\<c>` escapes resolved; `::` is one punct token; a number
//   with '.', 'e' or 'E' is floating, else integer (a leading '-' or '.' before a digit belongs to
//   it). Refuses (one diagnostic each, lexing goes on): an unterminated string (the token is kept)
//   and a character outside the format (skipped; a run of non-ASCII bytes is one diagnostic, its
//   bytes escaped as Note [escaped diagnostics] says); NUL bytes, one diagnostic for all of them
//   at the first, each then skipped like a space (Note [NUL bytes] in lexer.cpp). Stops at the
//   first diagnostic beyond max_diagnostics (too_many_errors set, that diagnostic dropped).
//   Linear in the input.
#pragma once

#include <string>
#include <vector>

#include "symmflow/ir/diagnostics.hpp"

namespace symmflow::ir::text_lexer {

enum class Tok { ident, integer, floating, string, punct, end };

struct Token {
  Tok kind = Tok::end;
  std::string text;
  SourceLoc loc;
};

struct LexResult {
  std::vector<Token> tokens;
  bool too_many_errors = false;
};

LexResult lex(const std::string& src, std::vector<Diagnostic>& diags, size_t max_diagnostics);

}  // namespace symmflow::ir::text_lexer
