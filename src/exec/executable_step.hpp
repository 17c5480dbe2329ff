// The precompiled steps of an Executable, shared by executable.cpp and executable_device.cpp
// (internal).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/fused.hpp"
#include "symmflow/ops/value.hpp"

namespace symmflow::exec {

// A plan step bound to this rank: `args` are the plan step's operands with rank-relative ints
// resolved (Note [rank-relative arguments] in ir/graph.hpp), so every operand is a value id (the
// slot of that value), a list of them, or a literal.
struct Executable::Step {
  const passes::PlanStep* plan = nullptr;
  std::vector<passes::Operand> args;
  // The launch record of a call step (Note [launch records] in executable.cpp), made by its first
  // call: the bound arguments with their literals in place (tensors are set per call and cleared
  // after it), the results' vector, and the kernel of the device its tensors live on.
  bool prepared = false;
  std::vector<Value> bound;
  std::vector<Value> outs;
  const Kernel* kernel = nullptr;  // null: resolved per call (no tensor operand to key it by)
  // What the kernel resolved from its literals on its first call (KernelCall::state), dropped
  // when the kernel changes.
  std::shared_ptr<void> kernel_state;
  Device device;
  int keyed_by = -1;  // the operand whose device picked the kernel
  // A fused step's region on the host, prepared by its first run (Note [fused programs prepared
  // once] in exec/fused.hpp).
  std::unique_ptr<FusedProgram> fused;
  std::string profile_label;  // Note [step profile]: made at the step's first timed run
};

// The registered backend for options.device (executable_device.cpp); InvalidUsage when none is.
std::unique_ptr<DeviceBackend> make_device_backend(const ExecOptions& options);

}  // namespace symmflow::exec
