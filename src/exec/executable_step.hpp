// The precompiled steps of an Executable, shared by executable.cpp and executable_device.cpp
// (internal).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "symmflow/exec/executable.hpp"
#include "symmflow/ops/value.hpp"

namespace symmflow::exec {

struct ArgRef {
  ir::Arg::Kind kind = ir::Arg::Kind::literal;
  int slot = -1;
  std::vector<int> slots;
  Value literal;
};

struct Executable::Step {
  const ir::Node* node = nullptr;
  const OpDef* op = nullptr;  // the op called (the out variant when lowered)
  bool out_variant = false;
  std::vector<ArgRef> args;                        // in `op`'s schema order
  std::vector<int> out_slots;                      // the node's outputs
  std::vector<bool> alias_return;                  // op nodes: return r aliases an argument
  std::vector<std::pair<size_t, int>> new_values;  // functional: (written arg, output slot)
};

// The registered backend for options.device (executable_device.cpp); InvalidUsage when none is.
std::unique_ptr<DeviceBackend> make_device_backend(const ExecOptions& options);

}  // namespace symmflow::exec
