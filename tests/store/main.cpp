// main() of test_store: `--child <scenario>` makes this process one rank of a store world started
// by a test (child.cpp); otherwise GoogleTest runs the tests, which start such children.
#include <cstring>

#include <gtest/gtest.h>

#include "child.hpp"

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--child") == 0)
    return symmflow::testing::run_child(argv[2]);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
