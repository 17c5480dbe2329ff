// Test support: the text of an error, so that a test asserts exact messages in one line.
//
// Guarantees: error_of runs `f` once and returns what() of the std::exception it throws (a
//   symmflow::Error, a DiagnosticError, ...), or "<no error>" when it returns normally, so
//   EXPECT_EQ(error_of(...), "message") fails both on another message and on no error. An
//   exception of another type propagates (the test fails on it).
#pragma once

#include <functional>
#include <string>

namespace symmflow::testing {

std::string error_of(const std::function<void()>& f);
// The same for a call that must be refused as bad input: what() of the symmflow::Error it throws
// when its code is InvalidUsage; another code comes back as "<Timeout error> what()" (so the
// EXPECT_EQ on the message fails and names the code), no error as "<no error>".
std::string usage_error_of(const std::function<void()>& f);

}  // namespace symmflow::testing
