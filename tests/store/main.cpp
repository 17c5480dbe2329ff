// main() of test_store and test_store_chaos: `--child <scenario>` makes this process one rank of a
// store world started by a test (child.cpp); otherwise GoogleTest runs the tests, which start such
// children. Every TcpStore needs the job's secret (Note [store secret] in
// src/runtime/store/tcp_protocol.hpp): the tests give one through SYMMFLOW_STORE_SECRET, which
// the children inherit, so that no test reads or creates the per-user secret file in $HOME.
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "child.hpp"

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--child") == 0)
    return symmflow::testing::run_child(argv[2]);
  std::string secret = "test-secret-" + std::to_string(std::random_device{}());
  ::setenv("SYMMFLOW_STORE_SECRET", secret.c_str(), 0);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
