// The mpi transport is a module loaded on first use (Note [mpi module] in
// src/runtime/mpi_module.cpp): nothing maps libmpi until the transport is asked for, and a module
// that cannot be loaded is an InvalidUsage naming its path, dlopen's reason and how to install MPI.
// SYMMFLOW_MPI_MODULE points the loader elsewhere; a failed load is retried on the next call, so
// each case sets it before its first use and the environment is restored after.
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

#include "symmflow/core/error.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow {
namespace {

bool libmpi_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find("libmpi") != std::string::npos;
}

class MpiModule : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* v = std::getenv("SYMMFLOW_MPI_MODULE")) saved_ = v;
  }
  void TearDown() override {
    if (saved_) {
      ::setenv("SYMMFLOW_MPI_MODULE", saved_->c_str(), 1);
    } else {
      ::unsetenv("SYMMFLOW_MPI_MODULE");
    }
  }
  static std::string init_error() {
    try {
      init_mpi();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
      return e.what();
    }
    ADD_FAILURE() << "init_mpi() did not raise";
    return "";
  }
  std::optional<std::string> saved_;
};

TEST_F(MpiModule, NothingMapsLibmpiBeforeTheTransportIsUsed) {
  // This binary links libsymmflow.so, as the Python module and the symmflow command do.
  EXPECT_FALSE(libmpi_mapped());
}

TEST_F(MpiModule, MissingModuleFileIsNamed) {
  ::setenv("SYMMFLOW_MPI_MODULE", "/nonexistent/libsymmflow_mpi.so", 1);
  EXPECT_EQ(init_error(),
            "init_mpi: the mpi transport's module /nonexistent/libsymmflow_mpi.so does not exist "
            "(SYMMFLOW_MPI_MODULE names another path)");
  EXPECT_FALSE(mpi_available());
  EXPECT_FALSE(libmpi_mapped());
}

TEST_F(MpiModule, ModuleThatCannotLoadSaysWhyAndHowToInstallMpi) {
  // Not a shared library: dlopen fails as it does when libmpi.so.40 is missing, with its reason.
  char path[] = "/tmp/symmflow_mpi_module_XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "not ELF\n", 8), 8);
  ::close(fd);
  ::setenv("SYMMFLOW_MPI_MODULE", path, 1);
  const std::string what = init_error();
  ::unlink(path);
  EXPECT_NE(what.find(std::string("init_mpi: loading the mpi transport's module ") + path +
                      " failed: "),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("the mpi transport needs an MPI library: install Open MPI (Debian, Ubuntu: "
                      "apt install openmpi-bin"),
            std::string::npos)
      << what;
  EXPECT_FALSE(mpi_available());
}

}  // namespace
}  // namespace symmflow
