// parse_schema: names, every type form, alias annotations, defaults and their parsed values,
// returns; and the printer pieces (Type::str, AliasInfo::str, Argument::str, qualified_name).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "symmflow/schema/schema.hpp"

namespace symmflow {
namespace {

Argument only_arg(const std::string& arg_text) {
  FunctionSchema s = parse_schema("f(" + arg_text + ") -> ()");
  EXPECT_EQ(s.args.size(), 1u);
  return s.args.at(0);
}

TEST(ParserTest, Names) {
  FunctionSchema s = parse_schema("aten::add.Tensor(Tensor self) -> Tensor");
  EXPECT_EQ(s.ns, "aten");
  EXPECT_EQ(s.name, "add");
  EXPECT_EQ(s.overload, "Tensor");
  EXPECT_EQ(s.qualified_name(), "aten::add.Tensor");

  FunctionSchema bare = parse_schema("relu(Tensor self) -> Tensor");
  EXPECT_EQ(bare.ns, "");
  EXPECT_EQ(bare.overload, "");
  EXPECT_EQ(bare.qualified_name(), "relu");

  FunctionSchema no_ns = parse_schema("sum.dim_IntList(Tensor self) -> Tensor");
  EXPECT_EQ(no_ns.qualified_name(), "sum.dim_IntList");
  EXPECT_EQ(parse_schema("symm_mem::barrier(str group_name) -> ()").qualified_name(),
            "symm_mem::barrier");
}

TEST(ParserTest, ArgIndex) {
  FunctionSchema s = parse_schema("f(Tensor a, int b, *, str c) -> ()");
  EXPECT_EQ(s.arg_index("a"), 0);
  EXPECT_EQ(s.arg_index("c"), 2);
  EXPECT_EQ(s.arg_index("d"), -1);
  EXPECT_FALSE(s.args[1].kwarg_only);
  EXPECT_TRUE(s.args[2].kwarg_only);
}

struct TypeCase {
  std::string text;
  TypeKind kind;
  bool elem_optional;
  bool is_list;
  std::optional<int64_t> list_size;
  bool list_optional;
};

TEST(ParserTest, EveryTypeForm) {
  const std::vector<TypeCase> cases = {
      {"Tensor", TypeKind::Tensor, false, false, std::nullopt, false},
      {"Tensor?", TypeKind::Tensor, true, false, std::nullopt, false},
      {"Tensor[]", TypeKind::Tensor, false, true, std::nullopt, false},
      {"Tensor?[]", TypeKind::Tensor, true, true, std::nullopt, false},
      {"int", TypeKind::Int, false, false, std::nullopt, false},
      {"int?", TypeKind::Int, true, false, std::nullopt, false},
      {"int[]", TypeKind::Int, false, true, std::nullopt, false},
      {"int[2]", TypeKind::Int, false, true, 2, false},
      {"int[]?", TypeKind::Int, false, true, std::nullopt, true},
      {"int[1]?", TypeKind::Int, false, true, 1, true},
      {"SymInt", TypeKind::SymInt, false, false, std::nullopt, false},
      {"SymInt[]", TypeKind::SymInt, false, true, std::nullopt, false},
      {"SymInt?", TypeKind::SymInt, true, false, std::nullopt, false},
      {"float", TypeKind::Float, false, false, std::nullopt, false},
      {"float?", TypeKind::Float, true, false, std::nullopt, false},
      {"float[]", TypeKind::Float, false, true, std::nullopt, false},
      {"bool", TypeKind::Bool, false, false, std::nullopt, false},
      {"bool?", TypeKind::Bool, true, false, std::nullopt, false},
      {"str", TypeKind::Str, false, false, std::nullopt, false},
      {"str?", TypeKind::Str, true, false, std::nullopt, false},
      {"Scalar", TypeKind::Scalar, false, false, std::nullopt, false},
      {"Scalar?", TypeKind::Scalar, true, false, std::nullopt, false},
      {"ScalarType", TypeKind::ScalarType, false, false, std::nullopt, false},
      {"ScalarType?", TypeKind::ScalarType, true, false, std::nullopt, false},
      {"Device?", TypeKind::Device, true, false, std::nullopt, false},
      {"Layout?", TypeKind::Layout, true, false, std::nullopt, false},
      {"MemoryFormat?", TypeKind::MemoryFormat, true, false, std::nullopt, false},
  };
  for (const TypeCase& c : cases) {
    SCOPED_TRACE(c.text);
    Argument a = only_arg(c.text + " x");
    EXPECT_EQ(a.type.kind, c.kind);
    EXPECT_EQ(a.type.elem_optional, c.elem_optional);
    EXPECT_EQ(a.type.is_list, c.is_list);
    EXPECT_EQ(a.type.list_size, c.list_size);
    EXPECT_EQ(a.type.list_optional, c.list_optional);
    EXPECT_EQ(a.type.str(), c.text);
    EXPECT_EQ(a.str(), c.text + " x");
    EXPECT_EQ(a.type.is_tensor_like(), c.kind == TypeKind::Tensor);
    EXPECT_EQ(type_kind_from_name(type_kind_name(c.kind)), c.kind);
  }
  EXPECT_TRUE(only_arg("Tensor? x").type.is_optional());
  EXPECT_FALSE(only_arg("Tensor?[] x").type.is_optional());
  EXPECT_TRUE(only_arg("int[]? x").type.is_optional());
  EXPECT_EQ(type_kind_from_name("Generator"), std::nullopt);
}

TEST(ParserTest, AliasAnnotations) {
  Argument read = only_arg("Tensor(a) self");
  ASSERT_TRUE(read.alias);
  EXPECT_EQ(read.alias->before_sets, std::vector<std::string>{"a"});
  EXPECT_FALSE(read.alias->is_write);
  EXPECT_TRUE(read.alias->after_sets.empty());
  EXPECT_FALSE(read.is_written());

  Argument write = only_arg("Tensor(a!) self");
  EXPECT_TRUE(write.is_written());
  EXPECT_EQ(write.alias->str(), "(a!)");

  Argument wildcard = only_arg("Tensor(a -> *) self");
  EXPECT_EQ(wildcard.alias->after_sets, std::vector<std::string>{"*"});
  EXPECT_EQ(wildcard.alias->str(), "(a -> *)");

  Argument two = only_arg("Tensor(a|b) self");
  EXPECT_EQ(two.alias->before_sets, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(two.alias->str(), "(a|b)");

  Argument full = only_arg("Tensor(a! -> a|b) self");
  EXPECT_TRUE(full.alias->is_write);
  EXPECT_EQ(full.alias->after_sets, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(full.str(), "Tensor(a! -> a|b) self");

  Argument list = only_arg("Tensor(a!)[] out");
  EXPECT_TRUE(list.type.is_list);
  EXPECT_TRUE(list.is_written());
  EXPECT_EQ(list.str(), "Tensor(a!)[] out");
  EXPECT_EQ(list.type.str(), "Tensor[]");

  EXPECT_EQ(only_arg("Tensor(a)? x").str(), "Tensor(a)? x");
}

TEST(ParserTest, DefaultValues) {
  using K = DefaultValue::Kind;
  Argument none = only_arg("Tensor? w=None");
  ASSERT_TRUE(none.default_value);
  EXPECT_EQ(none.default_value->kind, K::None);
  EXPECT_EQ(none.default_value->text, "None");

  Argument one = only_arg("int dim=1");
  EXPECT_EQ(one.default_value->kind, K::Int);
  EXPECT_EQ(one.default_value->int_value, 1);

  Argument minus = only_arg("int dim=-1");
  EXPECT_EQ(minus.default_value->int_value, -1);
  EXPECT_EQ(minus.str(), "int dim=-1");

  Argument eps = only_arg("float eps=1e-05");
  EXPECT_EQ(eps.default_value->kind, K::Float);
  EXPECT_DOUBLE_EQ(eps.default_value->float_value, 1e-05);
  EXPECT_EQ(eps.default_value->text, "1e-05");

  Argument half = only_arg("float p=0.5");
  EXPECT_DOUBLE_EQ(half.default_value->float_value, 0.5);
  EXPECT_EQ(only_arg("float p=1").default_value->kind, K::Int);  // an int literal fits float

  Argument empty = only_arg("int[] dims=[]");
  EXPECT_EQ(empty.default_value->kind, K::IntList);
  EXPECT_TRUE(empty.default_value->int_list.empty());
  EXPECT_EQ(empty.default_value->text, "[]");

  Argument list = only_arg("int[2] dims=[0,1]");
  EXPECT_EQ(list.default_value->kind, K::IntList);
  EXPECT_EQ(list.default_value->int_list, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(list.default_value->text, "[0, 1]");
  EXPECT_EQ(list.str(), "int[2] dims=[0, 1]");

  Argument floats = only_arg("float[] w=[1, 2.5]");
  EXPECT_EQ(floats.default_value->kind, K::FloatList);
  EXPECT_EQ(floats.default_value->float_list, (std::vector<double>{1, 2.5}));

  Argument broadcast = only_arg("int[2] dilation=1");
  EXPECT_EQ(broadcast.default_value->kind, K::Int);

  Argument sum = only_arg("str reduce='sum'");
  EXPECT_EQ(sum.default_value->kind, K::Str);
  EXPECT_EQ(sum.default_value->str_value, "sum");
  EXPECT_EQ(sum.default_value->text, "'sum'");

  Argument dq = only_arg("str s=\"x\"");
  EXPECT_EQ(dq.default_value->str_value, "x");
  EXPECT_EQ(dq.str(), "str s=\"x\"");

  Argument esc = only_arg(R"(str s='a\'b')");
  EXPECT_EQ(esc.default_value->str_value, "a'b");
  EXPECT_EQ(esc.str(), R"(str s='a\'b')");

  Argument t = only_arg("bool keepdim=True");
  EXPECT_EQ(t.default_value->kind, K::Bool);
  EXPECT_TRUE(t.default_value->bool_value);
  Argument f = only_arg("bool keepdim=False");
  EXPECT_FALSE(f.default_value->bool_value);

  Argument mf = only_arg("MemoryFormat memory_format=contiguous_format");
  EXPECT_EQ(mf.default_value->kind, K::Enum);
  EXPECT_EQ(mf.default_value->str_value, "contiguous_format");
  EXPECT_EQ(mf.str(), "MemoryFormat memory_format=contiguous_format");

  EXPECT_EQ(only_arg("ScalarType? dtype=long").default_value->kind, K::Enum);
  EXPECT_EQ(only_arg("Scalar alpha=1").default_value->kind, K::Int);
  EXPECT_EQ(only_arg("Scalar alpha=0.5").default_value->kind, K::Float);
  EXPECT_EQ(only_arg("int[]? dim=None").default_value->kind, K::None);
  EXPECT_EQ(only_arg("Device? device=\"cpu\"").default_value->kind, K::Str);
}

TEST(ParserTest, Returns) {
  EXPECT_TRUE(parse_schema("f() -> ()").returns.empty());

  FunctionSchema one = parse_schema("f(Tensor(a) x) -> Tensor(a)");
  ASSERT_EQ(one.returns.size(), 1u);
  EXPECT_EQ(one.returns[0].name, "");
  ASSERT_TRUE(one.returns[0].alias);
  EXPECT_EQ(one.returns[0].str(), "Tensor(a)");

  FunctionSchema tuple = parse_schema("f() -> (Tensor, Tensor)");
  EXPECT_EQ(tuple.returns.size(), 2u);
  EXPECT_EQ(tuple.str(), "f() -> (Tensor, Tensor)");

  FunctionSchema named = parse_schema("f() -> (Tensor values, Tensor indices)");
  EXPECT_EQ(named.returns[1].name, "indices");
  EXPECT_EQ(named.returns[1].str(), "Tensor indices");

  FunctionSchema list = parse_schema("f() -> Tensor[]");
  EXPECT_TRUE(list.returns[0].type.is_list);
  EXPECT_EQ(list.str(), "f() -> Tensor[]");

  FunctionSchema scalars = parse_schema("f() -> (int, float, bool)");
  EXPECT_EQ(scalars.returns[2].type.kind, TypeKind::Bool);
}

TEST(ParserTest, PrintingBuiltSchema) {
  FunctionSchema s;
  s.ns = "my";
  s.name = "op";
  Argument x;
  x.name = "x";
  x.alias = AliasInfo{{"a"}, true, {}};
  Argument n;
  n.name = "n";
  n.type.kind = TypeKind::Int;
  n.kwarg_only = true;
  n.default_value = DefaultValue{};
  n.default_value->kind = DefaultValue::Kind::Int;
  n.default_value->text = "3";
  s.args = {x, n};
  EXPECT_EQ(s.str(), "my::op(Tensor(a!) x, *, int n=3) -> ()");
  EXPECT_EQ(parse_schema(s.str()), s);
}

}  // namespace
}  // namespace symmflow
