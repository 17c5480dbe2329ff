// symmflow._core: the native half of the Python package (python/symmflow wraps it). It binds the
// front door (symmflow/symmflow.hpp) and the store bootstrap (runtime/store.hpp); tensors cross
// as DLPack (binding.hpp). Long C++ calls release the GIL; Python callbacks re-acquire it.
#include "binding.hpp"

NB_MODULE(_core, m) {
  namespace py = symmflow::python;
  m.attr("__version__") = SYMMFLOW_VERSION;
  py::bind_errors(m);
  py::bind_program(m);
  py::bind_ranks(m);
  py::bind_session(m);
}
