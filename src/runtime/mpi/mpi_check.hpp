// SF_MPI_CHECK: the one checking macro for MPI calls in symmflow.
//
//   SF_MPI_CHECK(MPI_Barrier(comm));
//
// Contract: MPI reports errors by return code only on objects whose error handler is
// MPI_ERRORS_RETURN (every communicator and window the mpi transport creates has it); a code other
// than MPI_SUCCESS becomes symmflow::Error with ErrorCode::Mpi and the message
// "MPI_Barrier(comm) failed: <MPI's error string> (src/runtime/x.cpp:42)".
// Only compiled into the mpi module, libsymmflow_mpi.so, built when MPI was found (Note [mpi module]
// in src/runtime/mpi_module.cpp).
#pragma once

// The C API only: MPI's deprecated C++ bindings need libmpi_cxx.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

namespace symmflow::detail {

// Throws Error(ErrorCode::Mpi) naming the call, MPI's error string and file:line.
[[noreturn]] void mpi_call_failed(int rc, const char* call, const char* file, int line);

}  // namespace symmflow::detail

#define SF_MPI_CHECK(call)                                                        \
  do {                                                                            \
    int sf_mpi_rc_ = (call);                                                      \
    if (sf_mpi_rc_ != MPI_SUCCESS)                                                \
      ::symmflow::detail::mpi_call_failed(sf_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)
