// Helpers of the tests whose ranks are processes (tests/mpi under mpirun, tests/store started by
// fork/exec): each test makes its own groups (so a test that leaves a group's allocation sequence
// out of step does not disturb the next), and run_rank() is the process counterpart of
// run_threads_collect for this rank: it returns the rank's error and poisons the world with it,
// as the threads transport does for a rank that throws.
#pragma once

#include <exception>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "symmflow/core/error.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::testing {

inline Runtime& rt() { return Runtime::current(); }

inline std::vector<int> all_ranks() {
  std::vector<int> out;
  for (int r = 0; r < rt().world_size(); ++r) out.push_back(r);
  return out;
}

// A new group of `ranks` (default: every rank) with a name unique in the process (numbered per
// prefix, so ranks that skip some prefixes still agree on the names).
inline std::string fresh_group(const std::string& prefix, std::vector<int> ranks = {}) {
  static std::map<std::string, int> counters;
  std::string name = prefix + std::to_string(counters[prefix]++);
  if (ranks.empty()) ranks = all_ranks();
  rt().new_group(name, ranks);
  return name;
}

inline std::exception_ptr run_rank(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    rt().bootstrap().poison(e.what());
    return std::current_exception();
  }
  return nullptr;
}

inline std::string message_of(const std::exception_ptr& p) {
  if (!p) return "<no error>";
  try {
    std::rethrow_exception(p);
  } catch (const std::exception& e) {
    return e.what();
  }
}

inline ErrorCode code_of(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    return e.code();
  } catch (...) {
  }
  return ErrorCode::Internal;
}

inline void set_timeout(double s) {
  Tunables t = tunables();
  t.timeout_s = s;
  set_tunables(t);
}

}  // namespace symmflow::testing
