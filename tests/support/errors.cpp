// Test support: error texts (contract in errors.hpp).
#include "support/errors.hpp"

#include <exception>

namespace symmflow::testing {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace symmflow::testing
