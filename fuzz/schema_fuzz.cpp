// libFuzzer target for the schema layer. Contract checked on every input:
//   - parse_schema either returns a schema or throws SchemaParseError; any other exception,
//     crash, sanitizer report or hang is a bug;
//   - a parsed schema s prints to a text that parses back to s and prints identically
//     (parse_schema(s.str()).str() == s.str());
//   - analyze_aliases and validate_schema accept every parsed schema without throwing.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "symmflow/core/error.hpp"
#include "symmflow/schema/schema.hpp"

namespace {

[[noreturn]] void fail(const char* what, const std::string& input, const std::string& detail) {
  std::fprintf(stderr, "schema_fuzz: %s\n  input:   %s\n  detail:  %s\n", what, input.c_str(),
               detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  symmflow::FunctionSchema schema;
  try {
    schema = symmflow::parse_schema(input);
  } catch (const symmflow::SchemaParseError& e) {
    if (e.column() < 1 || static_cast<size_t>(e.column()) > size + 1) {
      fail("error column out of range", input, e.what());
    }
    return 0;
  }
  const std::string printed = schema.str();
  symmflow::FunctionSchema reparsed;
  try {
    reparsed = symmflow::parse_schema(printed);
  } catch (const symmflow::SchemaParseError& e) {
    fail("printed schema does not parse", input, e.what());
  }
  if (reparsed.str() != printed) fail("print is not a fixed point", input, reparsed.str());
  if (!(reparsed == schema)) fail("reparsed schema differs", input, printed);
  symmflow::AliasAnalysis aliases = symmflow::analyze_aliases(schema);
  (void)aliases.is_view();
  (void)symmflow::validate_schema(schema);
  return 0;
}
