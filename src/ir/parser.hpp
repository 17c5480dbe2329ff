// The text-format parser's class, shared by its two files (private to src/ir): parser.cpp
// (statements, the body, the file) and parse_decls.cpp (types, layouts, group declarations).
// Contract and Note [parser limits]: parser.cpp.
#pragma once

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ir/lexer.hpp"
#include "symmflow/ir/text.hpp"

namespace symmflow::ir::text_parser {

using text_lexer::lex;
using text_lexer::Tok;
using text_lexer::Token;

struct ParseFailure {
  SourceLoc loc;
  std::string message;
};

// The most elements a parsed tensor type may have (Note [parser limits]).
constexpr int64_t kMaxElements = int64_t{1} << 40;

// Thrown when the parse must end at once (the nesting limit, too many errors); its diagnostic,
// if any, is already reported.
struct ParseStop {};

class Parser {
 public:
  Parser(std::vector<Token> toks, const ParseOptions& opts, std::vector<Diagnostic>& diags)
      : toks_(std::move(toks)), opts_(opts), diags_(diags) {}

  std::unique_ptr<Graph> parse_file();

 private:
  const Token& peek(size_t k = 0) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  bool is(const char* punct, size_t k = 0) const {
    return peek(k).kind == Tok::punct && peek(k).text == punct;
  }
  bool is_ident(const char* word) const { return peek().kind == Tok::ident && peek().text == word; }
  Token take() { return toks_[std::min(pos_++, toks_.size() - 1)]; }
  [[noreturn]] void fail(const Token& t, const std::string& msg) { throw ParseFailure{t.loc, msg}; }
  std::string describe(const Token& t) const {
    if (t.kind == Tok::end) return "end of input";
    if (t.kind == Tok::string) return fmt::format("\"{}\"", escape_bytes(t.text));
    return fmt::format("'{}'", t.text);
  }
  void expect(const char* punct) {
    if (!is(punct))
      fail(peek(), fmt::format("expected '{}' but found {}", punct, describe(peek())));
    take();
  }
  std::string expect_ident(const char* what) {
    if (peek().kind != Tok::ident)
      fail(peek(), fmt::format("expected {} but found {}", what, describe(peek())));
    return take().text;
  }
  void skip_statement(int line) {
    while (peek().kind != Tok::end && peek().loc.line == line) take();
  }
  // After skip_statement: a failed `fused(...) {` left its region open; skip to its closing
  // brace so the body's lines are not read as statements of the enclosing graph.
  void skip_open_region(size_t start) {
    int depth = 0;
    for (size_t k = start; k < pos_ && k < toks_.size(); ++k) depth += brace(toks_[k]);
    while (depth > 0 && peek().kind != Tok::end) depth += brace(take());
  }
  static int brace(const Token& t) {
    if (t.kind != Tok::punct) return 0;
    return t.text == "{" ? 1 : t.text == "}" ? -1 : 0;
  }

  void parse_group(Graph& g);
  void parse_subgroups(Graph& g, GroupDecl& d);
  TensorType parse_type();
  Layout parse_layout();
  std::vector<Layout> parse_layouts();
  void parse_body(Graph& g, bool nested);
  void parse_statement(Graph& g);
  std::vector<Token> parse_targets(Graph& g);
  Node* parse_copy(Graph& g);
  void parse_fused(Graph& g, const Token& head, const std::vector<Token>& targets);
  Node* parse_call(Graph& g, const std::vector<Token>& targets);
  void parse_call_args(Graph& g, std::vector<Arg>& args, std::vector<KwArg>& kwargs);
  void parse_attrs(Node* node);
  std::string parse_op_name();
  Arg parse_arg(Graph& g);
  symmflow::Value parse_literal_list(Graph& g, std::vector<Value*>* values);
  Value* lookup(Graph& g, const Token& t);

  void report(const ParseFailure& f) {
    if (f.message.empty()) return;
    if (diags_.size() >= opts_.max_diagnostics) {
      too_many_errors_ = true;
      throw ParseStop{};
    }
    diags_.push_back({f.loc, f.message});
  }

 public:
  bool too_many_errors() const { return too_many_errors_; }

 private:

  std::vector<Token> toks_;
  std::set<std::string> poisoned_;  // names of statements that failed: uses are not re-reported
  size_t pos_ = 0;
  int depth_ = 0;  // fused regions open around the statement being parsed
  bool too_many_errors_ = false;
  const ParseOptions& opts_;
  std::vector<Diagnostic>& diags_;
};

}  // namespace symmflow::ir::text_parser
