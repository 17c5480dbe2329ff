// Error types of symmflow. Every failure a user can cause surfaces as a symmflow::Error with a
// code; runtime errors name op, group, rank and peer in their message.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace symmflow {

enum class ErrorCode { InvalidUsage, Timeout, PeerFailure, System, Cuda, Mpi, Nccl, Internal };

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// Raised for malformed schemas; `column` is 1-based into the schema text.
class SchemaParseError : public Error {
 public:
  SchemaParseError(std::string text, int column, const std::string& what);
  int column() const { return column_; }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  int column_;
};

template <typename... Args>
[[noreturn]] void throw_error(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(code, fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void invalid_usage(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ErrorCode::InvalidUsage, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace symmflow

// Checks a condition that user input can break; throws InvalidUsage with the formatted message.
#define SF_CHECK(cond, ...)                          \
  do {                                               \
    if (!(cond)) ::symmflow::invalid_usage(__VA_ARGS__); \
  } while (0)

// Checks an internal invariant; a failure is a symmflow bug and names file:line.
#define SF_ASSERT(cond)                                                                   \
  do {                                                                                    \
    if (!(cond))                                                                          \
      ::symmflow::throw_error(::symmflow::ErrorCode::Internal, "internal error: {} ({}:{})", \
                              #cond, __FILE__, __LINE__);                                 \
  } while (0)
