// Built when MPI was not found: the mpi transport reports itself unavailable.
#include "symmflow/core/error.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow {

bool mpi_available() {
  return false;
}

Runtime& init_mpi(int*, char***) {
  invalid_usage(
      "symmflow was built without MPI: install libopenmpi-dev and rebuild to use the "
      "mpi transport");
}

}  // namespace symmflow
