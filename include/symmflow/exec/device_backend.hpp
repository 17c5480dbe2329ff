// The device side of an exec::Executable: where its pools live, which stream each step runs on,
// and how a run is launched (on CUDA: captured into one graph on the first run, replayed after).
// A backend library registers a factory for its device type (the cuda backend does so in
// bind_device()); the Executable stays free of device APIs.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "symmflow/core/tensor.hpp"
#include "symmflow/exec/streams.hpp"
#include "symmflow/ir/graph.hpp"
#include "symmflow/runtime/group.hpp"

namespace symmflow::exec {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual Device device() const = 0;
  // The regular pool and the heap of a symm pool (collective over `group`).
  virtual std::shared_ptr<Storage> allocate(size_t bytes) = 0;
  virtual std::shared_ptr<Storage> allocate_symmetric(const std::shared_ptr<Group>& group,
                                                      size_t bytes) = 0;
  // Everything that allocates or rendezvouses, before the first run: streams and events for
  // `steps`, the communicator of each group able to take its largest collective
  // (`collective_bytes`), library handles.
  virtual void prepare(const std::vector<StepStream>& steps,
                       const std::map<std::shared_ptr<Group>, size_t>& collective_bytes) = 0;
  // Enqueues a run: `before` (input staging) on the compute stream, then `steps`, which calls
  // begin_step/end_step around each step, then `after` (writebacks, outputs) on the compute
  // stream; with graphs, `steps` is captured on the first run and the graph replayed afterwards
  // (without calling `steps`).
  virtual void run(const std::function<void()>& before, const std::function<void()>& steps,
                   const std::function<void()>& after) = 0;
  virtual void begin_step(size_t step) = 0;
  virtual void end_step(size_t step) = 0;
  // A fused pointwise region (fuse_pointwise) over flat tensors on this device.
  virtual void run_fused(const ir::Graph& body, std::span<const Tensor> inputs,
                         std::span<const Tensor> outputs) = 0;
  // Waits for everything enqueued; raises what failed on the device (a collective's timeout).
  virtual void synchronize() = 0;
  // One line: device, streams, graph ("cuda:0, 2 streams, CUDA graph replay").
  virtual std::string describe() const = 0;
};

struct ExecOptions;
using DeviceBackendFactory = std::unique_ptr<DeviceBackend> (*)(const ExecOptions& options);
void set_device_backend_factory(DeviceType type, DeviceBackendFactory factory);

}  // namespace symmflow::exec
