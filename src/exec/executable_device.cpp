// The Executable on a device (executable.hpp): streams, input buffers, capture and replay.
//
// Streams: plan_streams (Note [streams of a plan] in streams.cpp).
//
// Note [device inputs]: the captured steps read every graph input from a fixed device buffer:
// the input's staging buffer when the caller may bind it (Note [zero-copy input binding]; its
// copy-in step then moves out of the graph), else a buffer of the Executable. run() copies each
// input there before the steps (on the compute stream, cudaMemcpyAsync: host or device tensors)
// unless the caller passed that very buffer (input_handle): zero copies.
#include <algorithm>
#include <map>
#include <mutex>

#include "exec/executable_step.hpp"
#include "exec/util.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::exec {

namespace {

std::mutex& factory_mutex() {
  static std::mutex m;
  return m;
}
DeviceBackendFactory& cuda_factory() {
  static DeviceBackendFactory f = nullptr;
  return f;
}

ByteRange range_of(const Tensor& t) {
  const char* base = static_cast<const char*>(t.raw_data());
  int64_t span = 1;
  for (size_t d = 0; d < t.shape().size(); ++d) span += (t.shape()[d] - 1) * t.strides()[d];
  if (t.numel() == 0) span = 0;
  return {base, base + span * int64_t(dtype_size(t.dtype())), false};
}

}  // namespace

void set_device_backend_factory(DeviceType type, DeviceBackendFactory factory) {
  SF_CHECK(type == DeviceType::cuda, "set_device_backend_factory: only cuda takes a factory");
  std::lock_guard lock(factory_mutex());
  cuda_factory() = factory;
}

std::unique_ptr<DeviceBackend> make_device_backend(const ExecOptions& options) {
  SF_CHECK(options.device.type == DeviceType::cuda, "Executable: cannot run on {}",
           options.device.str());
  DeviceBackendFactory f = nullptr;
  {
    std::lock_guard lock(factory_mutex());
    f = cuda_factory();
  }
  SF_CHECK(f,
           "Executable: the cuda backend is not loaded; link symmflow_cuda and call "
           "symmflow::cuda::bind_device() on each rank thread before making the Executable");
  return f(options);
}

void Executable::prepare_device() {
  const passes::Plan& p = *plan_;
  // Every step needs a kernel on the device's backend (checked now, not mid-capture).
  for (const auto& step : steps_) {
    const passes::PlanStep& ps = *step->plan;
    if (ps.kind != passes::StepKind::call && ps.kind != passes::StepKind::functional) continue;
    SF_CHECK(ps.op.called()->kernel(Backend::cuda),
             "Executable: {} ({}) has no cuda kernel yet; run this graph on the cpu",
             ps.node->display_name(), ps.op.called()->name());
  }
  // Note [device inputs]
  skip_always_.assign(steps_.size(), false);
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    if (staging_step_[i] >= 0) {
      handles_[i] = slots_[size_t(p.steps[size_t(staging_step_[i])].results[0])];
      skip_always_[size_t(staging_step_[i])] = true;
    } else {
      const ir::TensorType& t = p.values[size_t(p.inputs[i])].type;
      handles_[i] = Tensor::empty(t.shape, t.dtype, options_.device);
      ++allocations_;
    }
    slots_[size_t(p.inputs[i])] = handles_[i];
  }
  // Note [streams of a plan]
  auto range_of_slot = [&](int slot) -> ByteRange {
    if (slots_[size_t(slot)].defined()) return range_of(slots_[size_t(slot)]);
    int b = p.values[size_t(slot)].buffer;
    if (b >= 0) {
      while (p.buffers[size_t(b)].alias_of >= 0) b = p.buffers[size_t(b)].alias_of;
      if (buffer_views_[size_t(b)].defined()) return range_of(buffer_views_[size_t(b)]);
    }
    return {nullptr, nullptr, true};
  };
  auto add_ranges = [&](const passes::Operand& r, std::vector<ByteRange>& to) {
    if (r.kind == passes::Operand::Kind::value) to.push_back(range_of_slot(r.value));
    for (int slot : r.values) to.push_back(range_of_slot(slot));
  };
  std::vector<StepAccess> access(steps_.size());
  std::map<std::shared_ptr<Group>, size_t> collective_bytes;
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = *steps_[s];
    const passes::PlanStep& ps = *step.plan;
    StepAccess& a = access[s];
    a.runs = !skip_always_[s];
    for (const passes::Operand& r : step.args) add_ranges(r, a.reads);
    for (int slot : ps.results) a.writes.push_back(range_of_slot(slot));
    if (ps.kind == passes::StepKind::call) {
      for (int w : ps.written) add_ranges(step.args[size_t(w)], a.writes);
    }
    if (ps.group.empty()) continue;
    const std::shared_ptr<Group> group = runtime_->group(ps.group);
    a.communicates = group->size() > 1;
    size_t& bytes = collective_bytes[group];
    bytes = std::max(bytes, size_t(ps.bytes));
  }
  const std::vector<StepStream> streams = plan_streams(access, tunables().cuda_early_launch);
  device_->prepare(streams, collective_bytes);
  // No rank launches a collective before every peer finished preparing: on a shared GPU a peer
  // still creating its handles could otherwise wait behind that kernel (Note [ranks sharing a
  // GPU] in runtime/cuda/heap.cpp).
  for (const auto& [group, bytes] : collective_bytes) group->barrier(0, "Executable");
}

std::vector<Tensor> Executable::run_on_device(const std::vector<Tensor>& inputs,
                                              const RunOptions& options) {
  SF_CHECK(!options.on_step,
           "Executable::run: on_step times host steps, but on a GPU the steps are enqueued "
           "asynchronously (captured into a CUDA graph); time whole runs instead");
  auto before = [&] {
    // Note [barrier before each run], as a kernel on the compute stream that the whole run (its
    // graph included) follows; outside the graph, so it runs every time.
    for (const auto& [group, op] : entry_barriers_)
      call_bound(*op, {Value(group->name()), Value(int64_t(0))});
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (detail::same_memory(inputs[i], handles_[i])) {
        if (staging_step_[i] >= 0) ++stats_.input_copies_skipped;
        continue;
      }
      copy(handles_[i], inputs[i]);
    }
  };
  bool ran_steps = false;
  auto steps = [&] {
    const RunStats start = stats_;
    for (size_t s = 0; s < steps_.size(); ++s) {
      if (skip_always_[s]) continue;
      device_->begin_step(s);
      run_step(*steps_[s]);
      device_->end_step(s);
    }
    graph_stats_.copies = stats_.copies - start.copies;
    graph_stats_.bytes_copied = stats_.bytes_copied - start.bytes_copied;
    ran_steps = true;
  };
  std::vector<Tensor> results;
  auto after = [&] {
    write_back(inputs);
    results = collect_outputs(options);
  };
  device_->run(before, steps, after);
  if (!ran_steps) {  // a replay: the captured steps made the same copies
    stats_.copies += graph_stats_.copies;
    stats_.bytes_copied += graph_stats_.bytes_copied;
  }
  if (options.synchronize) device_->synchronize();
  return results;
}

void Executable::synchronize() {
  if (device_) device_->synchronize();
}

std::string Executable::device_description() const {
  return device_ ? device_->describe() : "cpu";
}

}  // namespace symmflow::exec
