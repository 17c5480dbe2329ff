// The cuda exec::DeviceBackend (backend.cpp), registered by module.cpp when the module loads.
#pragma once

#include <memory>

#include "symmflow/exec/device_backend.hpp"

namespace symmflow::cuda {

std::unique_ptr<exec::DeviceBackend> make_exec_backend(const exec::ExecOptions& options);

}  // namespace symmflow::cuda
