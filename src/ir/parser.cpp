// Parser of the text format (see text.hpp). Contract: builds the graph through the Graph builder
// (so every node is bound to its schema and typed by its shape function); checks SSA on the fly
// (a name is defined once, used after its definition); collects one diagnostic per bad statement
// (skipping to the next line) and throws them together with line and column. Tokens come from
// lexer.cpp. Refuses, ending the parse: fused regions nested deeper than ParseOptions::max_nesting
// and more than ParseOptions::max_diagnostics diagnostics (Note [parser limits]).
//
// Note [parser limits]: the parser must not be crashable or slowable by its input (fuzzed by
// fuzz/ir_fuzz.cpp). Fused regions are parsed recursively, so their depth is bounded (64 by
// default: real programs nest one or two levels) and going deeper is one diagnostic that ends the
// parse (the lines inside would only give follow-on errors). Like compilers, at most 20
// diagnostics are reported; the next one ends the parse with a "too many errors" line, so 100k
// bad lines cost what 21 do. A tensor type has at most 2^40 elements, so that shape functions and
// the memory planner never overflow int64 on written sizes. Every other step is linear: names and groups are looked up in maps,
// and diagnostics are rendered against a line index built once (diagnostics.cpp).
#include "ir/parser.hpp"

#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace symmflow::ir {

namespace text_parser {

Value* Parser::lookup(Graph& g, const Token& t) {
  Value* v = g.find_value(t.text);
  if (!v && poisoned_.count(t.text)) fail(t, "");  // already reported where it was defined
  if (!v) fail(t, fmt::format("use of undefined value '{}'", t.text));
  return v;
}

std::string Parser::parse_op_name() {
  std::string name = expect_ident("an op name");
  expect("::");
  name += "::" + expect_ident("an op name after '::'");
  if (is(".")) {
    take();
    name += "." + expect_ident("an overload name");
  }
  return name;
}

symmflow::Value Parser::parse_literal_list(Graph& g, std::vector<Value*>* values) {
  expect("[");
  std::vector<int64_t> ints;
  std::vector<double> floats;
  bool is_float = false;
  while (!is("]")) {
    Token t = peek();
    if (t.kind == Tok::ident) {
      values->push_back(lookup(g, t));
      take();
    } else if (t.kind == Tok::integer || t.kind == Tok::floating) {
      take();
      if (t.kind == Tok::floating) is_float = true;
      ints.push_back(std::strtoll(t.text.c_str(), nullptr, 10));
      floats.push_back(std::strtod(t.text.c_str(), nullptr));
    } else {
      fail(t, fmt::format("expected a list element but found {}", describe(t)));
    }
    if (!is("]")) expect(",");
  }
  take();
  if (!values->empty() && !ints.empty()) fail(peek(), "a list mixes values and numbers");
  if (is_float) return floats;
  return ints;
}

Arg Parser::parse_arg(Graph& g) {
  Token t = peek();
  switch (t.kind) {
    case Tok::string:
      take();
      return Arg::of_literal(t.text);
    case Tok::integer:
      take();
      return Arg::of_literal(int64_t(std::strtoll(t.text.c_str(), nullptr, 10)));
    case Tok::floating:
      take();
      return Arg::of_literal(std::strtod(t.text.c_str(), nullptr));
    case Tok::ident: {
      take();
      if (t.text == "True" || t.text == "False") return Arg::of_literal(t.text == "True");
      if (t.text == "None") return Arg::of_literal(None{});
      if (t.text == "rank" && (is("+") || (peek().kind == Tok::integer && peek().text[0] == '-'))) {
        // Note [rank-relative arguments] (graph.hpp): rank+k, rank-k.
        bool plus = is("+");
        if (plus) take();
        Token k = peek();
        if (k.kind != Tok::integer)
          fail(k, fmt::format("expected an integer after 'rank+' but found {}", describe(k)));
        take();
        return Arg::of_rank(int64_t(std::strtoll(k.text.c_str(), nullptr, 10)));
      }
      if (Value* v = g.find_value(t.text)) return Arg::of(v);
      if (auto d = parse_dtype(t.text)) return Arg::of_literal(*d);
      fail(t, fmt::format("use of undefined value '{}'", t.text));
    }
    case Tok::punct:
      if (t.text == "[") {
        std::vector<Value*> values;
        symmflow::Value lit = parse_literal_list(g, &values);
        return values.empty() ? Arg::of_literal(lit) : Arg::of_list(values);
      }
      [[fallthrough]];
    default:
      fail(t, fmt::format("expected an argument but found {}", describe(t)));
  }
}

// `a, b =`: the names a statement assigns (none for a statement without '='), each new.
std::vector<Token> Parser::parse_targets(Graph& g) {
  Token first = peek();
  std::vector<Token> targets;
  if (first.kind == Tok::ident && !is("::", 1) && !is("<", 1) && !is("(", 1)) {
    for (;;) {
      if (peek().kind != Tok::ident)
        fail(peek(), fmt::format("expected a result name but found {}", describe(peek())));
      targets.push_back(take());
      if (!is(",")) break;
      take();
    }
    expect("=");
  }
  for (const Token& t : targets) {
    if (g.find_value(t.text))
      fail(t, fmt::format("'{}' is already defined (values are assigned once)", t.text));
  }
  return targets;
}

// `copy(x)`
Node* Parser::parse_copy(Graph& g) {
  take();
  expect("(");
  Token src = peek();
  expect_ident("a value");
  expect(")");
  return g.add_copy(lookup(g, src), "");
}

// `fused(a, b) @(layouts) { body }`: the body is parsed as a graph of its own over the inputs.
void Parser::parse_fused(Graph& g, const Token& head, const std::vector<Token>& targets) {
  take();
  expect("(");
  std::vector<Value*> inputs;
  while (!is(")")) {
    Token v = peek();
    expect_ident("a value");
    inputs.push_back(lookup(g, v));
    for (size_t k = 0; k + 1 < inputs.size(); ++k)
      if (inputs[k] == inputs.back())
        fail(v, fmt::format("'{}' is passed to the fused region twice", v.text));
    if (!is(")")) expect(",");
  }
  take();
  std::vector<Layout> layouts = parse_layouts();
  expect("{");
  if (depth_ >= opts_.max_nesting) {  // Note [parser limits]
    report({head.loc, fmt::format("fused regions nested deeper than {}", opts_.max_nesting)});
    throw ParseStop{};
  }
  auto body = std::make_unique<Graph>("fused", g.world_size());
  for (Value* v : inputs) body->add_input(v->name(), v->type());
  {
    struct DepthGuard {
      int& depth;
      ~DepthGuard() { --depth; }
    } guard{++depth_};
    parse_body(*body, true);
  }
  if (targets.size() != body->outputs().size())
    fail(head, fmt::format("fused region returns {} values but {} names are assigned",
                           body->outputs().size(), targets.size()));
  Node* node = g.add_fused(inputs, std::move(body));
  for (size_t i = 0; i < layouts.size() && i < node->outputs().size(); ++i)
    node->output(i)->set_layout(layouts[i]);
  for (size_t i = 0; i < targets.size(); ++i) g.rename(node->output(i), targets[i].text);
  node->set_loc(head.loc);
}

// `(arg, ..., key=arg, ...)`: positional arguments, then keyword arguments.
void Parser::parse_call_args(Graph& g, std::vector<Arg>& args, std::vector<KwArg>& kwargs) {
  expect("(");
  while (!is(")")) {
    if (peek().kind == Tok::ident && is("=", 1)) {
      std::string key = take().text;
      take();
      kwargs.emplace_back(key, parse_arg(g));
    } else {
      if (!kwargs.empty()) fail(peek(), "positional argument after a keyword argument");
      args.push_back(parse_arg(g));
    }
    if (!is(")")) expect(",");
  }
  take();
}

// `ns::op(...)`, `ns::op.overload(...)` or `functional<ns::op>(...)`: the first overload that
// binds the arguments makes the node; otherwise the first overload's complaint is reported.
Node* Parser::parse_call(Graph& g, const std::vector<Token>& targets) {
  bool functional = peek().kind == Tok::ident && peek().text == "functional" && is("<", 1);
  if (functional) {
    take();
    expect("<");
  }
  Token name_tok = peek();
  std::string name = parse_op_name();
  if (functional) expect(">");
  std::vector<Arg> args;
  std::vector<KwArg> kwargs;
  parse_call_args(g, args, kwargs);
  const Registry& reg = Registry::global();
  std::vector<const OpDef*> candidates;
  if (name.find('.') != std::string::npos) {
    if (const OpDef* op = reg.find(name)) candidates.push_back(op);
  } else {
    candidates = reg.overloads(name);
  }
  if (candidates.empty()) {
    try {
      reg.get(name);
    } catch (const Error& e) {
      fail(name_tok, e.what());
    }
  }
  std::string why;
  for (const OpDef* op : candidates) {
    try {
      if (functional) return g.add_functional(*op, bind_node_args(*op, args, kwargs));
      return g.add_op(*op, args, kwargs, targets.size() == 1 ? targets[0].text : "");
    } catch (const Error& e) {
      if (why.empty()) why = e.what();  // the first overload's complaint is the useful one
    }
  }
  fail(name_tok, why);
}

// `{key = "value", ...}` after a call: the node's string attributes.
void Parser::parse_attrs(Node* node) {
  if (!is("{")) return;
  take();
  while (!is("}")) {
    std::string key = expect_ident("an attribute name");
    expect("=");
    Token v = peek();
    if (v.kind != Tok::string)
      fail(v, fmt::format("expected a string attribute value but found {}", describe(v)));
    take();
    node->attrs()[key] = v.text;
    if (!is("}")) expect(",");
  }
  take();
}

// One statement of a body: `names = copy(...)`, `= fused(...) {...}` or `= op(...)`, with its
// layouts and attributes.
void Parser::parse_statement(Graph& g) {
  std::vector<Token> targets = parse_targets(g);
  Token head = peek();
  if (head.kind == Tok::ident && head.text == "fused" && is("(", 1)) {
    parse_fused(g, head, targets);
    return;
  }
  Node* node = head.kind == Tok::ident && head.text == "copy" && is("(", 1)
                   ? parse_copy(g)
                   : parse_call(g, targets);
  node->set_loc(head.loc);
  std::vector<Layout> layouts = parse_layouts();
  parse_attrs(node);
  if (targets.size() != node->outputs().size()) {
    fail(head, fmt::format("{} returns {} value{} but {} name{} assigned", node->display_name(),
                           node->outputs().size(), node->outputs().size() == 1 ? "" : "s",
                           targets.size(), targets.size() == 1 ? " is" : "s are"));
  }
  if (!layouts.empty() && layouts.size() != node->outputs().size())
    fail(head,
         fmt::format("{} layouts given for {} results", layouts.size(), node->outputs().size()));
  for (size_t i = 0; i < targets.size(); ++i) g.rename(node->output(i), targets[i].text);
  for (size_t i = 0; i < layouts.size(); ++i) node->output(i)->set_layout(layouts[i]);
}

void Parser::parse_body(Graph& g, bool nested) {
  for (;;) {
    if (peek().kind == Tok::end) fail(peek(), "expected 'return' but found end of input");
    int line = peek().loc.line;
    if (is_ident("writeback") && peek(1).kind == Tok::ident && is("=", 2)) {
      try {
        take();
        Token target = take();
        take();
        Token source = peek();
        expect_ident("a value");
        Value* in = lookup(g, target);
        Value* v = lookup(g, source);
        try {
          g.add_writeback(in, v);
        } catch (const Error& e) {
          fail(target, e.what());
        }
      } catch (const ParseFailure& f) {
        report(f);
        skip_statement(line);
      }
      continue;
    }
    if (is_ident("return")) {
      take();
      std::vector<Value*> outs;
      if (is("(") && is(")", 1)) {
        take();
        take();
      } else {
        for (;;) {
          Token t = peek();
          expect_ident("a value to return");
          outs.push_back(lookup(g, t));
          if (!is(",")) break;
          take();
        }
      }
      g.set_outputs(outs);
      expect("}");
      return;
    }
    size_t start = pos_;
    try {
      try {
        parse_statement(g);
      } catch (const DiagnosticError&) {
        throw;
      } catch (const Error& e) {
        // A graph-building check the parser did not foresee still becomes a located
        // diagnostic, never an exception of another type (the ir_fuzz contract).
        throw ParseFailure{toks_[std::min(start, toks_.size() - 1)].loc, e.what()};
      }
    } catch (const ParseFailure& f) {
      report(f);
      std::vector<std::string> targets;  // the names before '=' of the failed statement
      for (size_t k = start; k < toks_.size() && toks_[k].loc.line == line; ++k) {
        if (toks_[k].kind == Tok::punct && toks_[k].text == "=") {
          poisoned_.insert(targets.begin(), targets.end());
          break;
        }
        if (toks_[k].kind == Tok::ident) targets.push_back(toks_[k].text);
      }
      skip_statement(line);
      skip_open_region(start);
      if (nested && is("}")) return;
    }
  }
}

std::unique_ptr<Graph> Parser::parse_file() {
  auto g = std::make_unique<Graph>("main", opts_.world_size);
  try {
    while (is_ident("group")) {
      int line = peek().loc.line;
      try {
        parse_group(*g);
      } catch (const ParseFailure& f) {
        report(f);
        skip_statement(line);
      }
    }
    if (!is_ident("graph"))
      fail(peek(), fmt::format("expected 'graph' but found {}", describe(peek())));
    take();
    auto named = std::make_unique<Graph>(expect_ident("a graph name"), opts_.world_size);
    named->set_source_file(opts_.filename);
    for (const GroupDecl& d : g->groups()) {
      if (d.name != "world") named->add_group(d);
    }
    g = std::move(named);
    expect("(");
    while (!is(")")) {
      Token name = peek();
      expect_ident("an input name");
      expect(":");
      TensorType type = parse_type();
      if (g->find_value(name.text))
        fail(name, fmt::format("input '{}' is defined twice", name.text));
      Value* v = g->add_input(name.text, type);
      v->set_loc(name.loc);
      std::vector<Layout> layouts = parse_layouts();
      if (!layouts.empty()) v->set_layout(layouts[0]);
      if (!is(")")) expect(",");
    }
    take();
    expect("{");
    parse_body(*g, false);
    if (peek().kind != Tok::end)
      fail(peek(), fmt::format("unexpected {} after the graph", describe(peek())));
  } catch (const ParseFailure& f) {
    try {
      report(f);
    } catch (const ParseStop&) {
    }
  } catch (const ParseStop&) {
  }
  return g;
}

}  // namespace text_parser

using text_parser::Parser;


std::unique_ptr<Graph> parse_graph(const std::string& text, const ParseOptions& options) {
  std::vector<Diagnostic> diags;
  text_lexer::LexResult lexed = text_lexer::lex(text, diags, options.max_diagnostics);
  bool too_many_errors = lexed.too_many_errors;
  std::unique_ptr<Graph> g;
  if (!too_many_errors) {
    Parser p(std::move(lexed.tokens), options, diags);
    g = p.parse_file();
    too_many_errors = p.too_many_errors();
  }
  if (too_many_errors) {
    diags.push_back({{}, fmt::format("too many errors ({} shown); stopping", diags.size())});
  }
  if (!diags.empty()) throw DiagnosticError(std::move(diags), options.filename, text);
  return g;
}

}  // namespace symmflow::ir
