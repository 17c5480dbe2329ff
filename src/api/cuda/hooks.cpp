// Part of the cuda backend library (symmflow_cuda): gives the api its GPU entry points when the
// library is loaded (Note [cuda behind hooks] in api/device_hooks.hpp).
#include "api/device_hooks.hpp"
#include "symmflow/runtime/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::api::detail {
namespace {

[[maybe_unused]] const bool kRegistered = [] {
  set_cuda_hooks({&cuda::device_count, &cuda::bind_device, &cuda::to_host});
  return true;
}();

}  // namespace
}  // namespace symmflow::api::detail
