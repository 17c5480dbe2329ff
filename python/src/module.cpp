// symmflow._core: the native half of the Python package (python/symmflow wraps it). It binds the
// front door (symmflow/symmflow.hpp) and the store bootstrap (runtime/store.hpp); tensors cross
// as DLPack (binding.hpp). Long C++ calls release the GIL; Python callbacks re-acquire it.
#include "binding.hpp"

NB_MODULE(_core, m) {
  namespace py = symmflow::python;
  m.attr("__version__") = SYMMFLOW_VERSION;
  // Sessions and ranks that torch.compile's caches (dynamo's compiled code, AOT wrappers) still
  // hold when the interpreter exits are freed by the process exit, not by Python; nanobind would
  // report each as a leak on every exit of a compiled PyTorch program. The store world is left
  // earlier, by the atexit hook of symmflow.init_store.
  nanobind::set_leak_warnings(false);
  py::bind_errors(m);
  py::bind_program(m);
  py::bind_ranks(m);
  py::bind_session(m);
  py::bind_builder(m);
}
