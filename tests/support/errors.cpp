// Test support: error texts (contract in errors.hpp).
#include "support/errors.hpp"

#include <exception>

#include "symmflow/core/error.hpp"

namespace symmflow::testing {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

std::string usage_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::InvalidUsage) return e.what();
    return std::string("<") + error_code_name(e.code()) + " error> " + e.what();
  }
  return "<no error>";
}

}  // namespace symmflow::testing
