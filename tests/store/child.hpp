// The rank side of the process tests: run_child(scenario) (child.cpp), called by main() when the
// binary was started with --child. Returns the process exit code.
#pragma once

#include <string>

namespace symmflow::testing {
int run_child(const std::string& scenario);
}
