// Finding and loading one of symmflow's modules: a shared library beside libsymmflow.so that
// registers itself from its static initializers as it loads (the cuda backend, Note [device
// modules] in src/exec/device_module.cpp; the mpi transport, Note [mpi module] in mpi_module.cpp).
// Both share where the file is and how a load fails; each keeps its own registration table.
#pragma once

#include <string>
#include <string_view>

namespace symmflow::runtime_detail {

struct ModuleFile {
  const char* env;               // overrides the path: "SYMMFLOW_CUDA_MODULE"
  const char* file;              // in the folder of libsymmflow.so: "libsymmflow_cuda.so"
  bool built;                    // this build made it
  std::string_view name;         // "the cuda backend module"
  std::string_view feature;      // "the cuda backend" (this symmflow was built without ...)
  std::string_view build_hint;   // appended to "built without": "" or "; install ... and rebuild"
  std::string_view load_hint;    // appended to a dlopen failure: "" or "; install ..."
};

// $env when set, else `file` in the folder that holds libsymmflow.so (dladdr).
std::string module_path(const ModuleFile& m);

// dlopens the module (RTLD_NOW | RTLD_GLOBAL) or raises InvalidUsage naming `what` and the path:
// built without it, the file missing, or dlopen's reason.
void load_module(const ModuleFile& m, std::string_view what);

}  // namespace symmflow::runtime_detail
