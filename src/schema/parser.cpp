// parse_schema: PyTorch's schema language, `ns::name.overload(args) -> returns`, read by a small
// lexer and a recursive-descent parser (one token of lookahead, no regex).
// Contract: every input either yields a FunctionSchema whose str() parses back to an equal schema,
// or throws SchemaParseError with the 1-based column of the offending token and what was expected.
// Nothing a user writes trips an assert or undefined behaviour; recursion depth is bounded.
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "symmflow/core/error.hpp"
#include "symmflow/schema/schema.hpp"

namespace symmflow {
namespace {

enum class Tok {
  Ident,
  Int,
  Float,
  String,
  LParen,
  RParen,
  LBracket,
  RBracket,
  Comma,
  Dot,
  Star,
  Question,
  Bang,
  Pipe,
  Equals,
  Arrow,
  ColonColon,
  End
};

struct Token {
  Tok kind = Tok::End;
  std::string_view text;
  int column = 1;  // 1-based
};

bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_ident_char(char c) {
  return is_ident_start(c) || is_digit(c);
}

// Quotes a piece of input for a message, escaping bytes that would garble it.
std::string quote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

std::string describe(const Token& t) {
  return t.kind == Tok::End ? std::string("end of input") : quote(t.text);
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  FunctionSchema parse() {
    FunctionSchema schema;
    parse_name(schema);
    expect(Tok::LParen, "'('");
    parse_args(schema);
    expect(Tok::RParen, "')'");
    expect(Tok::Arrow, "'->'");
    parse_returns(schema);
    if (peek().kind != Tok::End)
      fail(peek(), fmt::format("expected end of input but found {}", describe(peek())));
    return schema;
  }

 private:
  // ---- errors ----
  [[noreturn]] void fail_at(int column, const std::string& what) const {
    throw SchemaParseError(std::string(text_), column, what);
  }
  [[noreturn]] void fail(const Token& t, const std::string& what) const { fail_at(t.column, what); }
  [[noreturn]] void fail_expected(const std::string& what) {
    fail(peek(), fmt::format("expected {} but found {}", what, describe(peek())));
  }

  // ---- lexer ----
  Token lex() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
    Token t;
    t.column = static_cast<int>(pos_) + 1;
    if (pos_ >= text_.size()) {
      t.kind = Tok::End;
      return t;
    }
    size_t start = pos_;
    char c = text_[pos_];
    auto one = [&](Tok k) {
      ++pos_;
      t.kind = k;
      t.text = text_.substr(start, 1);
      return t;
    };
    switch (c) {
      case '(':
        return one(Tok::LParen);
      case ')':
        return one(Tok::RParen);
      case '[':
        return one(Tok::LBracket);
      case ']':
        return one(Tok::RBracket);
      case ',':
        return one(Tok::Comma);
      case '.':
        return one(Tok::Dot);
      case '*':
        return one(Tok::Star);
      case '?':
        return one(Tok::Question);
      case '!':
        return one(Tok::Bang);
      case '|':
        return one(Tok::Pipe);
      case '=':
        return one(Tok::Equals);
      default:
        break;
    }
    if (c == ':' && pos_ + 1 < text_.size() && text_[pos_ + 1] == ':') {
      pos_ += 2;
      t.kind = Tok::ColonColon;
      t.text = text_.substr(start, 2);
      return t;
    }
    if (c == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '>') {
      pos_ += 2;
      t.kind = Tok::Arrow;
      t.text = text_.substr(start, 2);
      return t;
    }
    if (is_ident_start(c)) {
      while (pos_ < text_.size() && is_ident_char(text_[pos_])) ++pos_;
      t.kind = Tok::Ident;
      t.text = text_.substr(start, pos_ - start);
      return t;
    }
    if (is_digit(c) || (c == '-' && pos_ + 1 < text_.size() && is_digit(text_[pos_ + 1]))) {
      return lex_number(t);
    }
    if (c == '\'' || c == '"') return lex_string(t);
    fail_at(t.column, fmt::format("unexpected character {}", quote(text_.substr(start, 1))));
  }

  // -?digits(.digits*)?([eE][+-]?digits)?
  Token lex_number(Token t) {
    size_t start = pos_;
    bool is_float = false;
    if (text_[pos_] == '-') ++pos_;
    while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      is_float = true;
      ++pos_;
      while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < text_.size() && (text_[p] == '+' || text_[p] == '-')) ++p;
      if (p < text_.size() && is_digit(text_[p])) {
        while (p < text_.size() && is_digit(text_[p])) ++p;
        pos_ = p;
        is_float = true;
      }
    }
    t.kind = is_float ? Tok::Float : Tok::Int;
    t.text = text_.substr(start, pos_ - start);
    return t;
  }

  // '...' or "..."; a backslash escapes the next character.
  Token lex_string(Token t) {
    size_t start = pos_;
    char q = text_[pos_++];
    while (pos_ < text_.size() && text_[pos_] != q) {
      if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
      ++pos_;
    }
    if (pos_ >= text_.size()) fail_at(t.column, "unterminated string literal");
    ++pos_;
    t.kind = Tok::String;
    t.text = text_.substr(start, pos_ - start);
    return t;
  }

  const Token& peek() {
    if (!peeked_) {
      look_ = lex();
      peeked_ = true;
    }
    return look_;
  }
  Token next() {
    Token t = peek();
    peeked_ = false;
    return t;
  }
  bool accept(Tok k) {
    if (peek().kind != k) return false;
    next();
    return true;
  }
  Token expect(Tok k, const char* what) {
    if (peek().kind != k) fail_expected(what);
    return next();
  }

  // ---- grammar ----
  // name := ident ('::' ident)? ('.' ident)?
  void parse_name(FunctionSchema& schema) {
    if (peek().kind != Tok::Ident) fail_expected("operator name");
    std::string first(next().text);
    if (accept(Tok::ColonColon)) {
      if (peek().kind != Tok::Ident) fail_expected("operator name after '::'");
      schema.ns = std::move(first);
      schema.name = std::string(next().text);
    } else {
      schema.name = std::move(first);
    }
    if (accept(Tok::Dot)) {
      if (peek().kind != Tok::Ident) fail_expected("overload name after '.'");
      schema.overload = std::string(next().text);
    }
  }

  void parse_args(FunctionSchema& schema) {
    if (peek().kind == Tok::RParen) return;
    bool kwarg_only = false;
    while (true) {
      if (peek().kind == Tok::Star) {
        Token star = next();
        if (kwarg_only) fail(star, "duplicate '*' (keyword-only marker)");
        kwarg_only = true;
        if (peek().kind != Tok::Comma) fail_expected("',' and an argument after '*'");
        next();
        continue;
      }
      schema.args.push_back(parse_arg(kwarg_only));
      if (!accept(Tok::Comma)) break;
    }
  }

  Argument parse_arg(bool kwarg_only) {
    Argument arg;
    arg.kwarg_only = kwarg_only;
    parse_type(arg.type, arg.alias, "argument type");
    if (peek().kind != Tok::Ident) fail_expected("argument name");
    arg.name = std::string(next().text);
    if (accept(Tok::Equals)) arg.default_value = parse_default(arg.type);
    return arg;
  }

  // type := base alias? '?'? ('[' int? ']' '?'?)?
  void parse_type(Type& type, std::optional<AliasInfo>& alias, const char* what) {
    if (peek().kind != Tok::Ident) fail_expected(what);
    Token base = next();
    std::optional<TypeKind> kind = type_kind_from_name(base.text);
    if (!kind) fail(base, fmt::format("unknown type {}", quote(base.text)));
    type.kind = *kind;
    if (peek().kind == Tok::LParen) alias = parse_alias();
    if (accept(Tok::Question)) type.elem_optional = true;
    if (accept(Tok::LBracket)) {
      type.is_list = true;
      if (peek().kind == Tok::Int) {
        Token size = next();
        int64_t n = 0;
        if (size.text[0] == '-' || !parse_int(size.text, n)) {
          fail(size, fmt::format("bad list size {}", quote(size.text)));
        }
        type.list_size = n;
      }
      expect(Tok::RBracket, "']'");
      if (accept(Tok::Question)) type.list_optional = true;
    }
  }

  // alias := '(' sets '!'? ('->' sets)? ')'   sets := set ('|' set)*   set := ident | '*'
  AliasInfo parse_alias() {
    expect(Tok::LParen, "'('");
    AliasInfo info;
    parse_alias_sets(info.before_sets);
    if (accept(Tok::Bang)) info.is_write = true;
    if (accept(Tok::Arrow)) parse_alias_sets(info.after_sets);
    if (peek().kind != Tok::RParen) {
      fail(peek(),
           fmt::format("bad alias annotation: expected ')' but found {}", describe(peek())));
    }
    next();
    return info;
  }

  void parse_alias_sets(std::vector<std::string>& sets) {
    while (true) {
      if (peek().kind != Tok::Ident && peek().kind != Tok::Star) {
        fail(peek(), "bad alias annotation: expected alias set name");
      }
      sets.emplace_back(next().text);
      if (!accept(Tok::Pipe)) break;
    }
  }

  void parse_returns(FunctionSchema& schema) {
    if (!accept(Tok::LParen)) {
      Return r;
      parse_type(r.type, r.alias, "return type");
      schema.returns.push_back(std::move(r));
      return;
    }
    if (accept(Tok::RParen)) return;
    while (true) {
      Return r;
      parse_type(r.type, r.alias, "return type");
      if (peek().kind == Tok::Ident) r.name = std::string(next().text);
      schema.returns.push_back(std::move(r));
      if (!accept(Tok::Comma)) break;
    }
    expect(Tok::RParen, "')'");
  }

  // ---- defaults ----
  static bool parse_int(std::string_view s, int64_t& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size();
  }
  static bool parse_float(std::string_view s, double& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size();
  }

  void number_value(const Token& t, DefaultValue& v, bool& is_float) {
    if (t.kind == Tok::Int) {
      int64_t i = 0;
      if (!parse_int(t.text, i))
        fail(t, fmt::format("integer literal {} out of range", quote(t.text)));
      v.int_list.push_back(i);
      v.float_list.push_back(static_cast<double>(i));
    } else {
      double d = 0;
      if (!parse_float(t.text, d))
        fail(t, fmt::format("float literal {} out of range", quote(t.text)));
      is_float = true;
      v.float_list.push_back(d);
    }
  }

  DefaultValue parse_default(const Type& type) {
    Token first = peek();
    DefaultValue v;
    switch (first.kind) {
      case Tok::Ident: {
        next();
        v.text = std::string(first.text);
        if (first.text == "None") {
          v.kind = DefaultValue::Kind::None;
        } else if (first.text == "True" || first.text == "False") {
          v.kind = DefaultValue::Kind::Bool;
          v.bool_value = first.text == "True";
        } else {
          v.kind = DefaultValue::Kind::Enum;
          v.str_value = v.text;
        }
        break;
      }
      case Tok::Int:
      case Tok::Float: {
        next();
        bool is_float = false;
        number_value(first, v, is_float);
        v.text = std::string(first.text);
        v.kind = is_float ? DefaultValue::Kind::Float : DefaultValue::Kind::Int;
        if (is_float) {
          v.float_value = v.float_list[0];
        } else {
          v.int_value = v.int_list[0];
        }
        v.int_list.clear();
        v.float_list.clear();
        break;
      }
      case Tok::String: {
        next();
        v.kind = DefaultValue::Kind::Str;
        v.text = std::string(first.text);
        std::string_view body = first.text.substr(1, first.text.size() - 2);
        for (size_t i = 0; i < body.size(); ++i) {
          if (body[i] == '\\' && i + 1 < body.size()) ++i;
          v.str_value += body[i];
        }
        break;
      }
      case Tok::LBracket: {
        next();
        bool is_float = false;
        std::vector<std::string_view> items;
        if (peek().kind != Tok::RBracket) {
          while (true) {
            if (peek().kind != Tok::Int && peek().kind != Tok::Float) {
              fail_expected("a number in list default");
            }
            Token item = next();
            number_value(item, v, is_float);
            items.push_back(item.text);
            if (!accept(Tok::Comma)) break;
          }
        }
        expect(Tok::RBracket, "']'");
        v.kind = is_float ? DefaultValue::Kind::FloatList : DefaultValue::Kind::IntList;
        if (is_float) v.int_list.clear();
        // Canonical list text, as PyTorch prints it: "[0, 1]".
        v.text = fmt::format("[{}]", fmt::join(items, ", "));
        break;
      }
      default:
        fail_expected("default value");
    }
    if (!default_fits(v, type)) {
      fail(first,
           fmt::format("default value {} does not fit type {}", quote(v.text), quote(type.str())));
    }
    return v;
  }

  // Which literal kinds a type accepts. A scalar number also fits a list of numbers (PyTorch
  // broadcasts it, as in `int[2] dilation=1`).
  static bool default_fits(const DefaultValue& v, const Type& type) {
    using K = DefaultValue::Kind;
    TypeKind t = type.kind;
    bool int_like = t == TypeKind::Int || t == TypeKind::SymInt;
    bool enum_like =
        t == TypeKind::ScalarType || t == TypeKind::Layout || t == TypeKind::MemoryFormat;
    switch (v.kind) {
      case K::None:
        return type.is_optional();
      case K::Int:
        if (type.is_list) return int_like || t == TypeKind::Float;
        return int_like || t == TypeKind::Float || t == TypeKind::Scalar || enum_like;
      case K::Float:
        if (type.is_list) return t == TypeKind::Float;
        return t == TypeKind::Float || t == TypeKind::Scalar;
      case K::Bool:
        return !type.is_list && (t == TypeKind::Bool || t == TypeKind::Scalar);
      case K::Str:
        return !type.is_list && (t == TypeKind::Str || t == TypeKind::Device);
      case K::Enum:
        return !type.is_list && enum_like;
      case K::IntList:
        if (!type.is_list) return false;
        return v.int_list.empty() || int_like || t == TypeKind::Float;
      case K::FloatList:
        if (!type.is_list) return false;
        return v.float_list.empty() || t == TypeKind::Float;
    }
    return false;
  }

  std::string_view text_;
  size_t pos_ = 0;
  Token look_;
  bool peeked_ = false;
};

}  // namespace

FunctionSchema parse_schema(std::string_view text) {
  return Parser(text).parse();
}

}  // namespace symmflow
