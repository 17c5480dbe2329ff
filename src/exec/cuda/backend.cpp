// The cuda DeviceBackend of exec::Executable (device_backend.hpp): two streams of the rank's GPU
// with events between them (Note [streams of a plan] in streams.cpp), pools in device
// memory and GPU symmetric heaps, communicators and the cuBLAS handle made before the first run,
// and the whole run captured into one CUDA graph per input binding and replayed afterwards (Note
// [device inputs] in src/exec/executable_device.cpp); a run on the caller's stream forks off it
// and joins back, inside the caller's own capture too (Note [caller's stream], same file).
// module.cpp registers the factory when the cuda module loads (Note [device modules]).
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <deque>

#include "exec/cuda/backend.hpp"
#include "exec/cuda/fused.hpp"
#include "kernels/cuda/gemm/blas.hpp"
#include "kernels/cuda/collectives/copy_stream.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {

namespace {

class CudaBackend : public exec::DeviceBackend {
 public:
  explicit CudaBackend(const exec::ExecOptions& options) : graphs_(options.cuda_graph) {
    int current = 0;
    SF_CUDA_CHECK(cudaGetDevice(&current));
    SF_CHECK(options.device.index == current,
             "Executable: asked to run on {} but this rank thread is bound to cuda:{} "
             "(cuda::bind_device())",
             options.device.str(), current);
    device_ = options.device;
    SF_CUDA_CHECK(cudaStreamCreateWithFlags(&streams_[0], cudaStreamNonBlocking));
    SF_CUDA_CHECK(cudaStreamCreateWithFlags(&streams_[1], cudaStreamNonBlocking));
    SF_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
    SF_CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
    SF_CUDA_CHECK(cudaEventCreateWithFlags(&caller_fork_, cudaEventDisableTiming));
    SF_CUDA_CHECK(cudaEventCreateWithFlags(&caller_join_, cudaEventDisableTiming));
    SF_CUDA_CHECK(cudaEventCreateWithFlags(&caller_replayed_, cudaEventDisableTiming));
  }

  ~CudaBackend() override {
    if (replayed_on_caller_) cudaEventSynchronize(caller_replayed_);
    cudaStreamSynchronize(streams_[0]);
    for (Captured& g : graphs_cache_) cudaGraphExecDestroy(g.exec);
    for (cudaEvent_t e : events_) {
      if (e) cudaEventDestroy(e);
    }
    cudaEventDestroy(fork_);
    cudaEventDestroy(join_);
    cudaEventDestroy(caller_fork_);
    cudaEventDestroy(caller_join_);
    cudaEventDestroy(caller_replayed_);
    cudaStreamDestroy(streams_[0]);
    cudaStreamDestroy(streams_[1]);
  }

  Device device() const override { return device_; }

  std::shared_ptr<Storage> allocate(size_t bytes) override {
    return allocate_device(device_.index, bytes, true);
  }

  std::shared_ptr<Storage> allocate_symmetric(const std::shared_ptr<Group>& group,
                                              size_t bytes) override {
    return std::make_shared<SymmetricDeviceStorage>(DeviceHeap::allocate(group, bytes, "Executable"));
  }

  void prepare(const std::vector<exec::StepStream>& steps,
               const std::map<std::shared_ptr<Group>, size_t>& collective_bytes) override {
    steps_ = steps;
    events_.assign(steps.size(), nullptr);
    launches_.assign(steps.size(), {});
    for (size_t s = 0; s < steps.size(); ++s) {
      launches_[s].in_plan = true;
      launches_[s].early = steps[s].early;
      launches_[s].after_communication = steps[s].after_communication;
      // launches_[s].stable: set per binding when the steps are enqueued (enqueue()).
      if (steps[s].recorded)
        SF_CUDA_CHECK(cudaEventCreateWithFlags(&events_[s], cudaEventDisableTiming));
    }
    for (const auto& [group, bytes] : collective_bytes) {
      if (group->spans_hosts())
        prepare_spanning(group, bytes), spanning_.push_back(group);  // Note [nccl engine]
      else
        comms_.push_back(&communicator(group, bytes));
    }
    blas_handle();
    copy_stream();  // the collective matmuls' (kernels/cuda/collectives/copy_stream.hpp)
    // Zeroed pools and heaps are ready (stream-ordered: Note [ranks sharing a GPU]).
    SF_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(current_stream())));
  }

  void run(const std::function<void()>& before, const std::function<void()>& steps,
           const std::function<void()>& after, const exec::RunBinding& binding) override {
    // A replay would launch the captured collectives without asking: a failed group is final
    // (Note [poisoned groups]).
    for (Communicator* c : comms_) c->check_usable("Executable::run");
    for (const auto& g : spanning_) check_spanning(g, "Executable::run");
    // Note [caller's stream]
    const bool on_caller = binding.stream.has_value();
    auto caller = static_cast<cudaStream_t>(binding.stream.value_or(nullptr));
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (on_caller) {
      SF_CUDA_CHECK(cudaStreamIsCapturing(caller, &status));
      SF_CHECK(status != cudaStreamCaptureStatusInvalidated,
               "Executable::run: the caller's stream is in an invalidated CUDA graph capture");
      if (status == cudaStreamCaptureStatusNone && replay_on_caller(before, after, binding, caller))
        return;
    }
    follow_caller_replays();
    if (on_caller) {
      SF_CUDA_CHECK(cudaEventRecord(caller_fork_, caller));
      SF_CUDA_CHECK(cudaStreamWaitEvent(streams_[0], caller_fork_, 0));
    }
    stable_ = binding.stable;
    {
      StreamGuard guard(streams_[0]);
      before();
      if (status == cudaStreamCaptureStatusActive) {
        enqueue_captured(steps);  // into the caller's capture
        ++caller_captures_;
      } else {
        launch(steps, binding.key);
      }
      set_current_stream(streams_[0]);
      after();
    }
    if (on_caller) {
      SF_CUDA_CHECK(cudaEventRecord(caller_join_, streams_[0]));
      SF_CUDA_CHECK(cudaStreamWaitEvent(caller, caller_join_, 0));
    }
    joined_caller_ = on_caller && status == cudaStreamCaptureStatusNone ? caller : kNoCaller;
  }

  // Note [replay on the caller's stream]: the run's fork off the caller's stream and its join
  // back (Note [caller's stream]) cost four CUDA calls around the graph's launch, a large part of
  // a small run's host time. A captured graph needs none of them: it carries its own streams as
  // dependencies and may be launched on any stream, where it follows the stream's earlier work
  // and precedes its later work. So when this binding's graph exists and the previous run joined
  // back into this same stream (so all of this backend's earlier work is ordered before it), the
  // graph is launched on the caller's stream itself, with the run's copies around it on that
  // stream too, and one event recorded after it. Any run that takes the full path afterwards
  // first makes the compute stream wait for that event, and synchronize(), the eviction of a
  // graph and the destructor wait for it: the event, not the caller's stream, which its owner may
  // have destroyed by then.
  bool replay_on_caller(const std::function<void()>& before, const std::function<void()>& after,
                        const exec::RunBinding& binding, cudaStream_t caller) {
    if (!graphs_ || joined_caller_ != caller) return false;
    auto it = std::find_if(graphs_cache_.begin(), graphs_cache_.end(),
                           [&](const Captured& g) { return g.key == binding.key; });
    if (it == graphs_cache_.end()) return false;
    stable_ = binding.stable;
    StreamGuard guard(caller);
    before();
    SF_CUDA_CHECK(cudaGraphLaunch(it->exec, caller));
    if (it != graphs_cache_.begin()) std::iter_swap(it, graphs_cache_.begin());
    after();
    SF_CUDA_CHECK(cudaEventRecord(caller_replayed_, caller));
    replayed_on_caller_ = true;
    ++caller_replays_;
    return true;
  }

  // The compute stream follows the graphs launched on a caller's stream (Note [replay on the
  // caller's stream]).
  void follow_caller_replays() {
    if (!replayed_on_caller_) return;
    SF_CUDA_CHECK(cudaStreamWaitEvent(streams_[0], caller_replayed_, 0));
    replayed_on_caller_ = false;
    joined_caller_ = kNoCaller;
  }

  void wait_for_caller_replays() {
    if (replayed_on_caller_) SF_CUDA_CHECK(cudaEventSynchronize(caller_replayed_));
  }

  // Enqueues the steps into a capture: kernels' scratch becomes the graph's allocation and free
  // nodes, and none may outlive the capture (Note [scratch inside a capture] in cuda_memory.hpp).
  void enqueue_captured(const std::function<void()>& steps) {
    cuda::CaptureScratch scratch;
    enqueue(steps);
    SF_CHECK(scratch.live() == 0,
             "a kernel kept {} GPU allocation(s) made while its steps were captured into a CUDA "
             "graph; a kernel's scratch must be freed before it returns",
             scratch.live());
  }

  // Replays the graph of this binding, capturing it first when there is none (Note [device
  // inputs]); without graphs, enqueues the steps.
  void launch(const std::function<void()>& steps, const std::vector<const void*>& key) {
    if (!graphs_) return enqueue(steps);
    for (auto it = graphs_cache_.begin(); it != graphs_cache_.end(); ++it) {
      if (it->key != key) continue;
      SF_CUDA_CHECK(cudaGraphLaunch(it->exec, streams_[0]));
      if (it != graphs_cache_.begin()) std::iter_swap(it, graphs_cache_.begin());
      return;
    }
    cudaGraph_t graph = nullptr;
    SF_CUDA_CHECK(cudaStreamBeginCapture(streams_[0], cudaStreamCaptureModeThreadLocal));
    try {
      enqueue_captured(steps);
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(streams_[0], &broken);
      if (broken) cudaGraphDestroy(broken);
      cudaGetLastError();
      throw;
    }
    SF_CUDA_CHECK(cudaStreamEndCapture(streams_[0], &graph));
    Captured captured{key, nullptr};
    cudaError_t made = cudaGraphInstantiate(&captured.exec, graph, 0);
    SF_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &graph_nodes_));
    cudaGraphDestroy(graph);
    SF_CUDA_CHECK(made);
    if (graphs_cache_.size() >= kGraphsKept) {
      SF_CUDA_CHECK(cudaStreamSynchronize(streams_[0]));  // the oldest may still run
      wait_for_caller_replays();
      cudaGraphExecDestroy(graphs_cache_.back().exec);
      graphs_cache_.pop_back();
    }
    graphs_cache_.push_front(captured);
    ++captures_;
    SF_CUDA_CHECK(cudaGraphLaunch(captured.exec, streams_[0]));
  }

  void begin_step(size_t step) override {
    const exec::StepStream& s = steps_[step];
    set_current_stream(streams_[s.stream]);
    set_current_launch(&launches_[step]);
    if (s.wait_for >= 0)
      SF_CUDA_CHECK(cudaStreamWaitEvent(streams_[s.stream], events_[size_t(s.wait_for)], 0));
  }

  void end_step(size_t step) override {
    const exec::StepStream& s = steps_[step];
    set_current_launch(nullptr);
    if (s.recorded) SF_CUDA_CHECK(cudaEventRecord(events_[step], streams_[s.stream]));
  }

  void run_fused(const ir::Graph& body, std::span<const Tensor> inputs,
                 std::span<const Tensor> outputs) override {
    cuda::run_fused(body, inputs, outputs);
  }

  void synchronize() override {
    wait_for_caller_replays();
    if (spanning_.empty())
      SF_CUDA_CHECK(cudaStreamSynchronize(streams_[0]));
    else
      synchronize_spanning(streams_[0], "Executable::synchronize");  // Note [bounded NCCL waits]
    for (Communicator* c : comms_) c->check();
  }

  std::string describe() const override {
    std::string graph =
        !graphs_ ? "no CUDA graph (steps enqueued every run)"
        : captures_ > 0
            ? fmt::format("CUDA graph of {} nodes, replayed{}", graph_nodes_,
                          captures_ > 1 ? fmt::format(" ({} input bindings captured)", captures_)
                                        : std::string())
            : "CUDA graph captured on the first run";
    if (caller_captures_ > 0)
      graph += fmt::format(", {} run(s) captured into the caller's graph", caller_captures_);
    if (caller_replays_ > 0)
      graph += fmt::format(", {} replay(s) launched on the caller's stream", caller_replays_);
    size_t on_comm = 0, early = 0;
    for (const exec::StepStream& s : steps_) {
      on_comm += s.stream == 1;
      early += s.early;
    }
    return fmt::format(
        "{}, compute and communication streams ({} of {} steps on the communication stream, {} "
        "start early), {}",
        device_.str(), on_comm, steps_.size(), early, graph);
  }

 private:
  // The steps between a fork of the communication stream off the compute stream and its join.
  void enqueue(const std::function<void()>& steps) {
    // What each step may read before its wait, at this binding's addresses (Note [early launch]):
    // only the launches enqueued now read it, a replay has it in its graph.
    for (size_t s = 0; stable_ && s < launches_.size() && s < stable_->size(); ++s) {
      launches_[s].stable.clear();
      for (const exec::ByteRange& r : (*stable_)[s]) launches_[s].stable.emplace_back(r.lo, r.hi);
    }
    SF_CUDA_CHECK(cudaEventRecord(fork_, streams_[0]));
    SF_CUDA_CHECK(cudaStreamWaitEvent(streams_[1], fork_, 0));
    // A step that throws leaves no pointer to launches_ behind (Note [early launch]).
    struct ResetLaunch {
      ~ResetLaunch() { set_current_launch(nullptr); }
    } reset;
    steps();
    set_current_stream(streams_[0]);
    SF_CUDA_CHECK(cudaEventRecord(join_, streams_[1]));
    SF_CUDA_CHECK(cudaStreamWaitEvent(streams_[0], join_, 0));
  }

  Device device_;
  bool graphs_ = true;
  cudaStream_t streams_[2] = {nullptr, nullptr};  // compute, communication
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  std::vector<cudaEvent_t> events_;
  std::vector<exec::StepStream> steps_;
  std::vector<StepLaunch> launches_;  // per step: Note [early launch]
  std::vector<Communicator*> comms_;
  std::vector<std::shared_ptr<Group>> spanning_;  // groups across hosts: NCCL (Note [nccl engine])
  // Note [device inputs]: the graphs of the last kGraphsKept bindings, most recent first.
  struct Captured {
    std::vector<const void*> key;
    cudaGraphExec_t exec = nullptr;
  };
  static constexpr size_t kGraphsKept = 4;
  std::deque<Captured> graphs_cache_;
  size_t captures_ = 0, caller_captures_ = 0, caller_replays_ = 0;
  cudaEvent_t caller_fork_ = nullptr, caller_join_ = nullptr;
  // Note [replay on the caller's stream]: the stream the last full run joined back into (none:
  // kNoCaller, as nullptr is the legacy default stream), and whether a graph launched on a
  // caller's stream may still run (caller_replayed_ recorded after it).
  static inline const cudaStream_t kNoCaller = reinterpret_cast<cudaStream_t>(~uintptr_t(0));
  cudaStream_t joined_caller_ = kNoCaller;
  cudaEvent_t caller_replayed_ = nullptr;
  bool replayed_on_caller_ = false;
  const std::vector<std::vector<exec::ByteRange>>* stable_ = nullptr;  // this run's binding
  size_t graph_nodes_ = 0;
};

}  // namespace

std::unique_ptr<exec::DeviceBackend> make_exec_backend(const exec::ExecOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

}  // namespace symmflow::cuda
