#include "symmflow/core/device.hpp"

#include <fmt/format.h>

namespace symmflow {

std::string Device::str() const {
  switch (type) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::cuda: return fmt::format("cuda:{}", index);
    case DeviceType::meta: return "meta";
  }
  return "?";
}

namespace {
thread_local Device bound_device = Device::cpu();
}  // namespace

Device thread_device() { return bound_device; }
void set_thread_device(Device device) { bound_device = device; }

}  // namespace symmflow
