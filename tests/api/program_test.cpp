// The api's programs, compilation and explain data (symmflow/api/program.hpp, explain.hpp):
// diagnostics with file:line:col, the explain data's fields on known examples, and its JSON
// round trip.
#include <gtest/gtest.h>

#include <string>

#include "symmflow/ir/graph.hpp"
#include "symmflow/symmflow.hpp"

namespace sf = symmflow::api;

namespace {

std::string example(const std::string& name) { return std::string(SYMMFLOW_EXAMPLES_DIR) + "/" + name; }

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const symmflow::Error& e) {
    return e.what();
  }
  return "(no error)";
}

const char* kBadProgram = R"(group tp
graph bad(x: f32[4, 8]) {
  y = aten::nope(x)
  z = aten::mm(x, x)
  return z
})";

}  // namespace

TEST(ApiProgram, ParseErrorsCarryFileLineAndColumn) {
  try {
    sf::Program::parse(kBadProgram, {"bad.sf", 2});
    FAIL() << "parsed";
  } catch (const sf::ProgramError& e) {
    ASSERT_GE(e.diagnostics().size(), 1u);
    const sf::Diagnostic& d = e.diagnostics()[0];
    EXPECT_EQ(d.file, "bad.sf");
    EXPECT_EQ(d.line, 3);
    EXPECT_EQ(d.column, 7);
    EXPECT_NE(d.message.find("aten::nope"), std::string::npos) << d.message;
    EXPECT_EQ(std::string(e.what()).rfind("bad.sf:3:7: error: ", 0), 0u) << e.what();
  }
}

TEST(ApiProgram, TryParseCollectsDiagnosticsWithoutThrowing) {
  sf::ParseResult r = sf::try_parse(kBadProgram, {"bad.sf", 2});
  EXPECT_FALSE(r.program.has_value());
  ASSERT_FALSE(r.diagnostics.empty());
  EXPECT_EQ(r.diagnostics[0].line, 3);
  EXPECT_EQ(r.message.rfind("bad.sf:3:7: error: ", 0), 0u) << r.message;
  sf::ParseResult ok = sf::try_parse("graph g(x: f32[2]) {\n  return x\n}\n");
  ASSERT_TRUE(ok.program.has_value());
  EXPECT_EQ(ok.program->name(), "g");
  EXPECT_TRUE(ok.diagnostics.empty());
}

TEST(ApiProgram, BadFilesAndWorldSizesAreErrors) {
  EXPECT_EQ(error_of([] { sf::Program::parse_file("/nonexistent/x.sf"); }),
            "cannot read '/nonexistent/x.sf'");
  EXPECT_EQ(error_of([] { sf::Program::parse_file(example("tp_mlp_small.sf"), 0); }),
            "--ranks must be at least 1 (got 0)");
  sf::Program p = sf::Program::parse_file(example("tp_mlp_small.sf"), 2);
  sf::CompileOptions o;
  o.print_after = {"nope"};
  EXPECT_EQ(error_of([&] { sf::compile(p, o); }).rfind("print_after: unknown pass 'nope' (known: ", 0),
            0u);
}

TEST(ApiProgram, InputsOutputsAndPrintAfter) {
  sf::Program p = sf::Program::parse_file(example("input_allreduce.sf"), 4);
  ASSERT_EQ(p.inputs().size(), 1u);
  EXPECT_EQ(p.inputs()[0].name, "x");
  EXPECT_EQ(p.inputs()[0].dtype, symmflow::DType::f32);
  EXPECT_EQ(p.inputs()[0].shape, (symmflow::Shape{32, 64}));
  ASSERT_EQ(p.outputs().size(), 1u);
  sf::CompileOptions o;
  o.print_after = {"realize_symm_mem"};
  sf::CompiledProgram c = sf::compile(p, o);
  ASSERT_EQ(c.printed_after().size(), 1u);
  EXPECT_EQ(c.printed_after()[0].first, "realize_symm_mem");
  EXPECT_NE(c.printed_after()[0].second.find("graph input_allreduce"), std::string::npos);
  EXPECT_TRUE(c.diagnostics().empty());
  EXPECT_NE(c.plan_text().find("one_shot_all_reduce"), std::string::npos);
  EXPECT_EQ(c.world_size(), 4);
  sf::CompileOptions two;
  two.world_size = 2;
  EXPECT_EQ(sf::compile(p, two).explain().collectives.at(0).ranks, 2);
}

TEST(ApiExplain, InputFedToAllReduceHasOneCopyAndOneCollective) {
  sf::CompiledProgram c = sf::compile(sf::Program::parse_file(example("input_allreduce.sf"), 4));
  const sf::ExplainData& d = c.explain();
  EXPECT_EQ(d.program, "input_allreduce");
  EXPECT_EQ(d.world_size, 4);
  ASSERT_EQ(d.copies.size(), 1u);
  EXPECT_EQ(d.copies[0].kind, "input");
  EXPECT_EQ(d.copies[0].bytes, 32u * 64 * 4);
  EXPECT_EQ(d.copies[0].reason.rfind("graph input 'x' feeds symm arg", 0), 0u) << d.copies[0].reason;
  ASSERT_EQ(d.collectives.size(), 1u);
  const sf::ExplainCollective& coll = d.collectives[0];
  EXPECT_EQ(coll.op, "symm_mem::one_shot_all_reduce");
  EXPECT_EQ(coll.group, "tp");
  EXPECT_EQ(coll.ranks, 4);
  EXPECT_EQ(coll.bytes, 8192);
  EXPECT_EQ(coll.cpu, "one_shot");
  EXPECT_EQ(coll.cuda, "one_shot_ll");
  EXPECT_FALSE(coll.why.empty());
  ASSERT_LT(size_t(coll.step), d.steps.size());
  EXPECT_TRUE(d.steps[size_t(coll.step)].communicates);
  bool symm = false;
  for (const sf::ExplainPool& p : d.pools) {
    EXPECT_LE(p.lower_bound_bytes, p.peak_bytes) << p.name;
    symm = symm || p.name == "symm[tp]";
  }
  EXPECT_TRUE(symm);
  for (const sf::ExplainBuffer& b : d.buffers) {
    EXPECT_EQ(b.dtype, symmflow::DType::f32) << b.name;
    EXPECT_EQ(b.shape, (symmflow::Shape{32, 64})) << b.name;
    EXPECT_EQ(b.bytes, 8192u) << b.name;
    if (b.pool_index >= 0) {
      EXPECT_EQ(b.pool, d.pools[size_t(b.pool_index)].name);
      EXPECT_LE(b.offset + b.bytes, d.pools[size_t(b.pool_index)].peak_bytes);
    }
  }
}

TEST(ApiExplain, TextIsWhatExplainPrints) {
  sf::CompiledProgram c = sf::compile(sf::Program::parse_file(example("tp_mlp_small.sf"), 2));
  std::string text = sf::format_explain(c.explain(), "f.sf");
  EXPECT_EQ(text.rfind("plan of tp_mlp_small (f.sf, 2 ranks): ", 0), 0u) << text;
  EXPECT_NE(text.find("compiler-added copies: 0\n"), std::string::npos);
  EXPECT_NE(text.find("collectives: 8 "), std::string::npos);
  EXPECT_NE(text.find("occupancy of symm[tp]"), std::string::npos);
}

TEST(ApiExplain, JsonRoundTripsToEqualData) {
  for (const char* name : {"input_allreduce.sf", "tp_mlp_small.sf", "halo_exchange.sf",
                           "inplace_allreduce.sf", "pointwise_then_allreduce.sf"}) {
    sf::CompiledProgram c = sf::compile(sf::Program::parse_file(example(name), 4));
    sf::ExplainData back = sf::explain_from_json(c.explain_json());
    EXPECT_EQ(back, c.explain()) << name;
    EXPECT_EQ(sf::to_json(back), c.explain_json()) << name;
    EXPECT_FALSE(back.steps.empty()) << name;
  }
}

TEST(ApiExplain, MalformedJsonIsAnError) {
  EXPECT_EQ(error_of([] { sf::explain_from_json("{}"); }).rfind("explain JSON does not parse: ", 0),
            0u);
  EXPECT_EQ(error_of([] { sf::explain_from_json("[1"); }).rfind("explain JSON does not parse: ", 0),
            0u);
}

// A program built with the IR builder (symmflow/ir/graph.hpp) compiles like a parsed one.
TEST(ApiProgram, ProgramsBuiltInMemory) {
  symmflow::ir::Graph g("built", 2);
  g.add_group({"tp", 0, {}, {}});
  symmflow::ir::Value* x = g.add_input("x", {symmflow::DType::f32, {4, 8}});
  symmflow::ir::Node* r = g.add_op("symm_mem::one_shot_all_reduce",
                                   {symmflow::ir::Arg::of(x), symmflow::ir::Arg::of_literal("sum"),
                                    symmflow::ir::Arg::of_literal("tp")});
  g.set_outputs({r->output()});
  sf::Program p = sf::Program::from_graph(g, 2);
  EXPECT_EQ(p.name(), "built");
  EXPECT_EQ(p.filename(), "<graph built>");
  sf::CompiledProgram c = sf::compile(p);
  ASSERT_EQ(c.explain().collectives.size(), 1u);
  EXPECT_EQ(c.explain().collectives[0].bytes, 4 * 8 * 4);
  EXPECT_EQ(c.explain().copies.size(), 1u);  // the input fed to a symm arg
}
