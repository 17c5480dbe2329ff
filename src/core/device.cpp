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

}  // namespace symmflow
