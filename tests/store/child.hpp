// The rank side of the process tests: run_child(scenario) (child.cpp), called by main() when the
// binary was started with --child. Returns the process exit code.
#pragma once

#include <string>

#include "symmflow/runtime/runtime.hpp"

namespace symmflow::testing {
int run_child(const std::string& scenario);
// The chaos tests' scenarios (chaos_<name>, chaos_child.cpp), once `r` joined its world.
int run_chaos_child(const std::string& scenario, Runtime& r);
}
