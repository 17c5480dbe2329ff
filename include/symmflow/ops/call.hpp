// Eager calls through the registry: bind arguments to the schema, run the shape function,
// allocate fresh outputs, dispatch to the kernel of the arguments' backend.
//
//   Tensor c = symmflow::call("aten::mm", {a, b}).to_tensor();
//   symmflow::call("aten::add", {a, b}, {{"alpha", 2.0}});   // overload resolved from the args
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "symmflow/ops/registry.hpp"

namespace symmflow {

using KwArgs = std::vector<std::pair<std::string, Value>>;

// Binds positional and keyword arguments to a schema: one Value per schema argument, defaults
// filled in, types checked. Throws InvalidUsage naming op and argument on a mismatch.
std::vector<Value> bind_args(const OpDef& op, const std::vector<Value>& args,
                             const KwArgs& kwargs = {});

// Calls an op. `name` is "ns::name.overload" or "ns::name" (the first overload whose schema binds
// the arguments is chosen). Returns None for `()`, the single return, or a tensor list for
// several returns and for a list return (`Tensor[]`, however many results it has).
Value call(std::string_view name, const std::vector<Value>& args, const KwArgs& kwargs = {});
// The same on an op already looked up, with already bound arguments.
std::vector<Value> call_bound(const OpDef& op, std::vector<Value> bound);
// The same, writing fresh returns into `outputs` where they are already set (planned buffers of
// the right dtype and shape); unset ones are allocated. `outputs` has one entry per result: one
// per return, or for a list return (Note [list returns], schema.hpp) one per element, as many as
// the shape function gives when `outputs` comes empty (else as many as it comes with).
void call_bound_into(const OpDef& op, std::span<const Value> bound, std::vector<Value>& outputs);
// call_bound_into in two halves, for callers that resolve the kernel once and call it many times
// (an executor's launch records, Note [launch records] in exec/executable.cpp): the kernel of the
// device the arguments live on (else the preset outputs', else the thread's for a factory, else
// the cpu), with that device; then the call with a kernel so found for arguments on `device`.
const Kernel& kernel_for(const OpDef& op, std::span<const Value> bound,
                         std::span<const Value> outputs, Device& device);
void call_kernel_into(const OpDef& op, const Kernel& kernel, Device device,
                      std::span<const Value> bound, std::vector<Value>& outputs,
                      std::shared_ptr<void>* state = nullptr);  // KernelCall::state

}  // namespace symmflow
