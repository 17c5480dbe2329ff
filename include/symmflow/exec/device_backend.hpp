// The device side of an exec::Executable: where its pools live, which stream each step runs on,
// and how a run is launched (on CUDA: captured into one graph on the first run, replayed after).
// A backend library registers a factory for its device type (the cuda backend does so in
// bind_device()); the Executable stays free of device APIs.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "symmflow/core/tensor.hpp"
#include "symmflow/exec/streams.hpp"
#include "symmflow/ir/graph.hpp"
#include "symmflow/runtime/group.hpp"

namespace symmflow::exec {

// How one run is bound (Note [device inputs] and Note [caller's stream] in executable_device.cpp).
struct RunBinding {
  // The caller's stream (a cudaStream_t; a null pointer is the legacy default stream), or none.
  // When set, the run waits for the work queued there before the call, that stream waits for
  // the run, and nothing waits on the host; while that stream is being captured into the
  // caller's CUDA graph, the steps are enqueued into that capture instead of a graph of the
  // backend's own.
  std::optional<void*> stream;
  // Where the steps find the graph inputs this run: a graph captured for one key is replayed
  // only for the same key (the backend keeps the graphs of the last few keys).
  std::vector<const void*> key;
  // Per step: what it reads that no step writes, at this binding's addresses (StepStream::stable
  // rebased onto the bound inputs); read only when the steps are enqueued, not on a replay.
  const std::vector<std::vector<ByteRange>>* stable = nullptr;
};

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
  // stream; with graphs, `steps` is captured the first time a binding is seen and its graph
  // replayed afterwards (without calling `steps`). Note [device inputs] in executable_device.cpp.
  virtual void run(const std::function<void()>& before, const std::function<void()>& steps,
                   const std::function<void()>& after, const RunBinding& binding) = 0;
  virtual void begin_step(size_t step) = 0;
  virtual void end_step(size_t step) = 0;
  // A fused pointwise region (fuse_pointwise) on this device: exec::run_fused's contract (flat
  // tensors; an input may be strided or broadcast: Note [fused casts and broadcasts]).
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
