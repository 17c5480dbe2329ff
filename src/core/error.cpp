#include "symmflow/core/error.hpp"

namespace symmflow {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidUsage: return "InvalidUsage";
    case ErrorCode::Timeout: return "Timeout";
    case ErrorCode::PeerFailure: return "PeerFailure";
    case ErrorCode::System: return "System";
    case ErrorCode::Cuda: return "Cuda";
    case ErrorCode::Mpi: return "Mpi";
    case ErrorCode::Nccl: return "Nccl";
    case ErrorCode::Internal: return "Internal";
  }
  return "Unknown";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(message), code_(code) {}

static std::string caret_message(const std::string& text, int column, const std::string& what) {
  std::string caret(size_t(column > 0 ? column - 1 : 0), ' ');
  return fmt::format("schema error at column {}: {}\n  {}\n  {}^", column, what, text, caret);
}

SchemaParseError::SchemaParseError(std::string text, int column, const std::string& what)
    : Error(ErrorCode::InvalidUsage, caret_message(text, column, what)),
      text_(std::move(text)),
      column_(column) {}

}  // namespace symmflow
