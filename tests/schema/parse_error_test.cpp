// Malformed schemas: each throws SchemaParseError with the exact message and 1-based column.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "symmflow/core/error.hpp"
#include "symmflow/schema/schema.hpp"

namespace symmflow {
namespace {

struct ErrorCase {
  std::string text;
  int column;
  std::string message;
};

void PrintTo(const ErrorCase& c, std::ostream* os) {
  *os << c.text;
}

class ParseError : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ParseError, ExactMessageAndColumn) {
  const ErrorCase& c = GetParam();
  try {
    FunctionSchema s = parse_schema(c.text);
    FAIL() << "parsed as " << s.str();
  } catch (const SchemaParseError& e) {
    EXPECT_EQ(e.column(), c.column);
    EXPECT_EQ(e.text(), c.text);
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
    std::string what = e.what();
    std::string first_line = what.substr(0, what.find('\n'));
    EXPECT_EQ(first_line, "schema error at column " + std::to_string(c.column) + ": " + c.message);
  }
}

const std::vector<ErrorCase> kCases = {
    // Missing parentheses.
    {"foo(Tensor x", 13, "expected ')' but found end of input"},
    {"foo(Tensor x -> ()", 14, "expected ')' but found '->'"},
    {"foo Tensor x) -> ()", 5, "expected '(' but found 'Tensor'"},
    {"f() -> (Tensor a, Tensor b", 27, "expected ')' but found end of input"},
    // Names.
    {"", 1, "expected operator name but found end of input"},
    {"(Tensor x) -> ()", 1, "expected operator name but found '('"},
    {"aten::(Tensor x) -> ()", 7, "expected operator name after '::' but found '('"},
    {"aten::add.(Tensor x) -> ()", 11, "expected overload name after '.' but found '('"},
    // Types.
    {"foo(Tensr x) -> ()", 5, "unknown type 'Tensr'"},
    {"foo(Generator? g) -> ()", 5, "unknown type 'Generator'"},
    {"foo() -> Tensr", 10, "unknown type 'Tensr'"},
    {"foo(Tensor) -> ()", 11, "expected argument name but found ')'"},
    {"foo(int[-1] x) -> ()", 9, "bad list size '-1'"},
    {"foo(int[2 x) -> ()", 11, "expected ']' but found 'x'"},
    {"foo(int[99999999999999999999] x) -> ()", 9, "bad list size '99999999999999999999'"},
    // Alias annotations.
    {"foo(Tensor(!) x) -> ()", 12, "bad alias annotation: expected alias set name"},
    {"foo(Tensor() x) -> ()", 12, "bad alias annotation: expected alias set name"},
    {"foo(Tensor(a -> ) x) -> ()", 17, "bad alias annotation: expected alias set name"},
    {"foo(Tensor(a| ) x) -> ()", 15, "bad alias annotation: expected alias set name"},
    {"foo(Tensor(a x) -> ()", 14, "bad alias annotation: expected ')' but found 'x'"},
    {"foo(Tensor(a!!) x) -> ()", 14, "bad alias annotation: expected ')' but found '!'"},
    // Defaults of the wrong type, pointing at the default.
    {"foo(bool x=[1]) -> ()", 12, "default value '[1]' does not fit type 'bool'"},
    {"foo(int x=None) -> ()", 11, "default value 'None' does not fit type 'int'"},
    {"foo(Tensor x=None) -> ()", 14, "default value 'None' does not fit type 'Tensor'"},
    {"foo(Tensor?[] x=None) -> ()", 17, "default value 'None' does not fit type 'Tensor?[]'"},
    {"foo(bool b=1) -> ()", 12, "default value '1' does not fit type 'bool'"},
    {"foo(int n=0.5) -> ()", 11, "default value '0.5' does not fit type 'int'"},
    {"foo(int n=True) -> ()", 11, "default value 'True' does not fit type 'int'"},
    {"foo(str s=1) -> ()", 11, "default value '1' does not fit type 'str'"},
    {"foo(float f='a') -> ()", 13, "default value ''a'' does not fit type 'float'"},
    {"foo(int[2] x=[1.5, 2]) -> ()", 14, "default value '[1.5, 2]' does not fit type 'int[2]'"},
    {"foo(int x=[]) -> ()", 11, "default value '[]' does not fit type 'int'"},
    {"foo(str s=sum) -> ()", 11, "default value 'sum' does not fit type 'str'"},
    {"foo(Tensor? t=1) -> ()", 15, "default value '1' does not fit type 'Tensor?'"},
    // Malformed literals.
    {"foo(int x=) -> ()", 11, "expected default value but found ')'"},
    {"foo(int[] x=[1,]) -> ()", 16, "expected a number in list default but found ']'"},
    {"foo(int[] x=[1 2]) -> ()", 16, "expected ']' but found '2'"},
    {"foo(int x=99999999999999999999) -> ()", 11,
     "integer literal '99999999999999999999' out of range"},
    {"foo(float x=1e999) -> ()", 13, "float literal '1e999' out of range"},
    {"foo(str s='abc) -> ()", 11, "unterminated string literal"},
    {"foo(int x=@) -> ()", 11, "unexpected character '@'"},
    {"foo(int x=-) -> ()", 11, "unexpected character '-'"},
    {"foo(int x:1) -> ()", 10, "unexpected character ':'"},
    {"foo(int x=\x01) -> ()", 11, "unexpected character '\\x01'"},
    // Missing arrow, trailing junk.
    {"foo(Tensor x) Tensor", 15, "expected '->' but found 'Tensor'"},
    {"foo(Tensor x)", 14, "expected '->' but found end of input"},
    {"foo(Tensor x) -> Tensor junk", 25, "expected end of input but found 'junk'"},
    {"foo(Tensor x) -> () )", 21, "expected end of input but found ')'"},
    {"foo(Tensor x) -> ", 18, "expected return type but found end of input"},
    // Keyword-only marker.
    {"foo(Tensor x, *, int y, *, int z) -> ()", 25, "duplicate '*' (keyword-only marker)"},
    {"foo(Tensor x, *) -> ()", 16, "expected ',' and an argument after '*' but found ')'"},
    {"foo(*, *, int z) -> ()", 8, "duplicate '*' (keyword-only marker)"},
};

INSTANTIATE_TEST_SUITE_P(Malformed, ParseError, ::testing::ValuesIn(kCases));

TEST(ParseErrorTest, MessageShowsTextAndCaret) {
  try {
    parse_schema("foo(Tensr x) -> ()");
    FAIL();
  } catch (const SchemaParseError& e) {
    EXPECT_STREQ(e.what(),
                 "schema error at column 5: unknown type 'Tensr'\n"
                 "  foo(Tensr x) -> ()\n"
                 "      ^");
  }
}

}  // namespace
}  // namespace symmflow
