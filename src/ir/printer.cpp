// Printer of the text format (see text.hpp). Arguments filled from schema defaults are omitted;
// keyword-only arguments print as name=value; layouts print when assigned.
#include <cctype>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "symmflow/ir/text.hpp"

namespace symmflow::ir {

namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string print_double(double d) {
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // n: nan, inf
  return s;
}

std::string layouts_of(const std::vector<Value*>& values) {
  bool any = false;
  std::vector<std::string> parts;
  for (const Value* v : values) {
    any = any || v->layout().pool != Pool::unassigned;
    parts.push_back(v->layout().str());
  }
  if (!any) return "";
  if (parts.size() == 1) return " @ " + parts[0];
  return fmt::format(" @ ({})", fmt::join(parts, ", "));
}

// Names as printed: a fused body's inputs take the names of the node's arguments (as the parser
// binds them), whatever passes renamed since the region was made.
using Names = std::unordered_map<const Value*, std::string>;

const std::string& name_of(const Value* v, const Names& names) {
  auto it = names.find(v);
  return it == names.end() ? v->name() : it->second;
}

std::string arg_text(const Arg& a, const Names& names) {
  switch (a.kind) {
    case Arg::Kind::value:
      return name_of(a.value, names);
    case Arg::Kind::value_list: {
      std::vector<std::string> parts;
      for (const Value* v : a.values) parts.push_back(name_of(v, names));
      return fmt::format("[{}]", fmt::join(parts, ", "));
    }
    case Arg::Kind::literal:
      return print_literal(a.literal);
    case Arg::Kind::rank_relative:
      return rank_relative_text(a.rank_offset);
  }
  return "";
}

void print_nodes(const Graph& g, int indent, std::string& out, const Names& names);

void print_node(const Node& n, int indent, std::string& out, const Names& names) {
  std::string pad(size_t(indent), ' ');
  std::vector<std::string> defined;
  for (const Value* v : n.outputs()) defined.push_back(v->name());
  std::string lhs = defined.empty() ? "" : fmt::format("{} = ", fmt::join(defined, ", "));
  std::vector<std::string> args;
  if (n.kind() == NodeKind::op || n.kind() == NodeKind::functional) {
    const FunctionSchema& s = n.op()->schema();
    for (size_t i = 0; i < n.args().size(); ++i) {
      const Arg& a = n.args()[i];
      if (a.defaulted) continue;
      std::string text = arg_text(a, names);
      args.push_back(s.args[i].kwarg_only ? s.args[i].name + "=" + text : text);
    }
  } else {
    for (const Arg& a : n.args()) args.push_back(arg_text(a, names));
  }
  std::string call = fmt::format("{}({})", n.display_name(), fmt::join(args, ", "));
  std::string attrs;
  if (!n.attrs().empty()) {
    std::vector<std::string> kv;
    for (const auto& [k, v] : n.attrs()) kv.push_back(fmt::format("{} = {}", k, quote(v)));
    attrs = fmt::format(" {{{}}}", fmt::join(kv, ", "));
  }
  out += fmt::format("{}{}{}{}{}", pad, lhs, call, layouts_of(n.outputs()), attrs);
  if (n.kind() == NodeKind::fused) {
    out += " {\n";
    Names inner;
    const std::vector<Value*>& ins = n.body()->inputs();
    for (size_t i = 0; i < ins.size() && i < n.args().size(); ++i) {
      if (n.args()[i].kind == Arg::Kind::value) inner[ins[i]] = name_of(n.args()[i].value, names);
    }
    print_nodes(*n.body(), indent + 2, out, inner);
    out += pad + "}";
  }
  out += "\n";
}

void print_nodes(const Graph& g, int indent, std::string& out, const Names& names) {
  for (const Node* n : g.nodes()) print_node(*n, indent, out, names);
  for (const Graph::Writeback& w : g.writebacks())
    out += fmt::format("{}writeback {} = {}\n", std::string(size_t(indent), ' '),
                       name_of(w.input, names), name_of(w.value, names));
  std::vector<std::string> returned;
  for (const Value* v : g.outputs()) returned.push_back(name_of(v, names));
  out += fmt::format("{}return {}\n", std::string(size_t(indent), ' '),
                     returned.empty() ? "()" : fmt::format("{}", fmt::join(returned, ", ")));
}

}  // namespace

std::string print_literal(const symmflow::Value& v) {
  if (v.is_string()) return quote(v.to_string());
  if (v.is_double()) return print_double(v.to_double());
  if (v.is_double_list()) {
    std::vector<std::string> parts;
    for (double d : v.to_double_list()) parts.push_back(print_double(d));
    return fmt::format("[{}]", fmt::join(parts, ", "));
  }
  return v.str();  // None, True/False, ints, int lists, dtypes
}

std::string print_graph(const Graph& g) {
  std::string out;
  for (const GroupDecl& d : g.groups()) {
    if (d.name == "world") continue;
    if (!d.subgroups.empty()) {
      std::vector<std::string> subgroups;
      for (const std::vector<int>& s : d.subgroups)
        subgroups.push_back(fmt::format("{{{}}}", fmt::join(s, ", ")));
      out += fmt::format("group {} = {}\n", d.name, fmt::join(subgroups, ", "));
    } else {
      out += d.block > 0 ? fmt::format("group {}({})\n", d.name, d.block)
                         : fmt::format("group {}\n", d.name);
    }
  }
  std::vector<std::string> params;
  for (const Value* v : g.inputs()) {
    std::string layout = v->layout().pool == Pool::unassigned ? "" : " @ " + v->layout().str();
    params.push_back(fmt::format("{}: {}{}", v->name(), v->type().str(), layout));
  }
  out += fmt::format("graph {}({}) {{\n", g.name(), fmt::join(params, ", "));
  print_nodes(g, 2, out, {});
  out += "}\n";
  return out;
}

std::string safe_value_name(std::string_view hint) {
  std::string out;
  for (char c : hint) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "v_" + out;
  static const char* const kWords[] = {"True",  "False",     "None",  "rank",       "graph",
                                       "group", "return",    "fused", "functional", "copy",
                                       "world", "writeback", "inf",   "nan"};
  for (const char* w : kWords) {
    if (out == w) return out + "_";
  }
  if (parse_dtype(out)) return out + "_";
  return out;
}

}  // namespace symmflow::ir
