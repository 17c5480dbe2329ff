// Declarations of the text format: tensor types, layouts and group declarations (explicit
// subgroups included, Note [explicit groups] in graph.cpp). Part of the parser (parser.hpp; its
// contract and Note [parser limits] are in parser.cpp).
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/parser.hpp"

namespace symmflow::ir::text_parser {

TensorType Parser::parse_type() {
  Token t = peek();
  std::string name = expect_ident("a dtype");
  auto dtype = parse_dtype(name);
  if (!dtype) fail(t, fmt::format("unknown dtype '{}'", name));
  expect("[");
  Shape shape;
  int64_t elements = 1;
  while (!is("]")) {
    Token d = peek();
    if (d.kind != Tok::integer)
      fail(d, fmt::format("expected a dimension but found {}", describe(d)));
    take();
    int64_t v = std::strtoll(d.text.c_str(), nullptr, 10);
    if (v < 0) fail(d, fmt::format("negative dimension {}", v));
    // Note [parser limits]: sizes stay far from int64 overflow in shape functions and planning.
    if (v > kMaxElements || (v > 0 && elements > kMaxElements / v))
      fail(d, fmt::format("tensor of more than 2^40 elements (dimension {})", d.text));
    elements *= std::max<int64_t>(v, 1);
    shape.push_back(v);
    if (!is("]")) expect(",");
  }
  take();
  return {*dtype, shape};
}

Layout Parser::parse_layout() {
  Token t = peek();
  std::string word = expect_ident("a layout (regular or symm[group])");
  if (word == "regular") return Layout::regular();
  if (word != "symm")
    fail(t, fmt::format("unknown layout '{}' (expected regular or symm[group])", word));
  expect("[");
  std::string group = expect_ident("a group name");
  expect("]");
  return Layout::symm(group);
}

std::vector<Layout> Parser::parse_layouts() {
  std::vector<Layout> out;
  if (!is("@")) return out;
  take();
  if (is("(")) {
    take();
    while (!is(")")) {
      out.push_back(parse_layout());
      if (!is(")")) expect(",");
    }
    take();
  } else {
    out.push_back(parse_layout());
  }
  return out;
}

// `group tp`, `group tp(2)` or `group dp = {0, 2}, {1, 3}` (Note [explicit groups] in
// graph.cpp); members are checked here so that each complaint points at its rank.
void Parser::parse_group(Graph& g) {
  Token kw = take();
  GroupDecl d;
  d.loc = kw.loc;
  d.name = expect_ident("a group name");
  if (is("(")) {
    take();
    Token n = peek();
    if (n.kind != Tok::integer)
      fail(n, fmt::format("expected a block size but found {}", describe(n)));
    take();
    long long block = std::strtoll(n.text.c_str(), nullptr, 10);
    if (block <= 0 || block > g.world_size())
      fail(n, fmt::format("group '{}': block size {} is not between 1 and the world size {}",
                          d.name, n.text, g.world_size()));
    d.block = int(block);
    expect(")");
  } else if (is("=")) {
    take();
    parse_subgroups(g, d);
  } else if (peek().kind != Tok::end && peek().loc.line == kw.loc.line) {
    fail(peek(), fmt::format("expected '(' or '=' after the group name but found {} (write "
                             "`group {} = {{0, 2}}, {{1, 3}}` for listed members, `group {}(2)` "
                             "for blocks of 2 ranks)",
                             describe(peek()), d.name, d.name));
  }
  try {
    g.add_group(d);
  } catch (const Error& e) {
    fail(kw, e.what());
  }
}

// `{0, 2}, {1, 3}`: ranks within the world, each in one subgroup, subgroups of one size.
void Parser::parse_subgroups(Graph& g, GroupDecl& d) {
  std::vector<int> subgroup_of(size_t(std::max(g.world_size(), 0)), -1);
  for (;;) {
    Token open = peek();
    expect("{");
    std::vector<int> members;
    while (!is("}")) {
      Token m = peek();
      if (m.kind != Tok::integer)
        fail(m, fmt::format("expected a rank but found {}", describe(m)));
      take();
      long long r = std::strtoll(m.text.c_str(), nullptr, 10);
      if (r < 0 || r >= g.world_size())
        fail(m, fmt::format("group '{}': rank {} is outside the world of {} rank{}", d.name,
                            m.text, g.world_size(), g.world_size() == 1 ? "" : "s"));
      int& at = subgroup_of[size_t(r)];
      if (at >= 0) {
        const std::vector<int>& other = size_t(at) < d.subgroups.size() ? d.subgroups[size_t(at)]
                                                                          : members;
        fail(m, fmt::format("group '{}': rank {} is already in subgroup {{{}}} (a rank is in at "
                            "most one subgroup of a group)",
                            d.name, r, fmt::join(other, ", ")));
      }
      at = int(d.subgroups.size());
      members.push_back(int(r));
      if (!is("}")) expect(",");
    }
    take();
    if (members.empty()) fail(open, fmt::format("group '{}': empty subgroup", d.name));
    if (!d.subgroups.empty() && members.size() != d.subgroups[0].size())
      fail(open, fmt::format("group '{}': subgroup {{{}}} has {} rank{} but {{{}}} has {} (the "
                             "subgroups of a group have one size)",
                             d.name, fmt::join(members, ", "), members.size(),
                             members.size() == 1 ? "" : "s", fmt::join(d.subgroups[0], ", "),
                             d.subgroups[0].size()));
    d.subgroups.push_back(std::move(members));
    if (!is(",")) break;
    take();
  }
}


}  // namespace symmflow::ir::text_parser
