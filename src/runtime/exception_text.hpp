// What a terminate hook says about the exception in flight, shared by the process transports
// (mpi/mpi_init.cpp, store/store_init.cpp) when an uncaught exception poisons the world.
#pragma once

#include <exception>
#include <string>

#include <fmt/format.h>

namespace symmflow::runtime_detail {

// "uncaught exception: <what>" for the exception in flight, "uncaught exception" for one that is
// no std::exception, "terminated" when none is in flight.
inline std::string current_exception_text() {
  std::exception_ptr e = std::current_exception();
  if (!e) return "terminated";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return fmt::format("uncaught exception: {}", x.what());
  } catch (...) {
    return "uncaught exception";
  }
}

}  // namespace symmflow::runtime_detail
