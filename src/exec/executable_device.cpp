// The Executable on a device (executable.hpp): streams, input buffers, capture and replay.
//
// Streams: plan_streams (Note [streams of a plan] in streams.cpp).
//
// Note [device inputs]: the steps read every graph input from one of three places.
//  - A staged input (a symm arg: Note [zero-copy input binding]) from its staging buffer; run()
//    copies the caller's tensor there before the steps, or skips the copy when the caller passed
//    that very buffer (input_handle), and the copy-in moves out of the captured steps.
//  - Any other input that is already on the plan's GPU, contiguous and outside the plan's own
//    pools (a PyTorch parameter or activation, a device tensor the caller keeps): in place, no
//    copy. A CUDA graph holds addresses, so the backend captures one graph per binding (the
//    addresses of all inputs, RunBinding::key) and replays it only for the same binding; it keeps
//    the graphs of the last few bindings, so weights that stay put and activations that alternate
//    between a few blocks of a caching allocator replay without re-capture.
//  - Anything else (host tensors, strided views, a view of the plan's own output fed back) from a
//    device buffer of the Executable (input_handle, made on first use): copied there first.
// The stream plan (Note [streams of a plan]) is made once, before any binding is known, so each
// non-staged input gets a synthetic byte range of its own (disjoint from every real address and
// from each other: distinct inputs are taken not to overlap, as on the host). The ranges a step
// reads that nothing writes (StepStream::stable, Note [early launch]) are rebased onto each run's
// bound addresses, so a GEMM behind a collective still loads a bound weight before its wait.
//
// Note [views after a replay]: a view step runs on the host (it sets its result's slot, it launches
// nothing), so a replayed graph does not redo it, and a view's slot keeps the address of the run
// that last ran the steps. The steps inside the graph never read slots, but the host does after
// the run: collect_outputs and write_back read the slots of outputs and written-back values. When
// such a value is a view of memory that changes with the binding (a caller's input, or an output
// bound in place through its base: Note [outputs that are views] in executable_outputs.cpp), a
// replay for another binding would copy the previous binding's memory into the destination:
// found as a training run that drifted from eager after its graphs began to alternate. So the
// view steps that outputs and written-back values read, through chains of views, are redone on
// the host after every replay (replay_views_, a few microseconds), before the outputs are taken.
//
// Note [caller's stream]: with RunOptions::stream (PyTorch's current stream, say) a run forks off
// that stream (an event it records, which the compute stream waits for), runs as usual, and joins
// back (the caller's stream waits for an event of the compute stream): no host synchronisation,
// and the caller's later work, and its caching allocator's reuse of the inputs' memory, follow
// the run. When that stream is being captured into a CUDA graph (torch.cuda.graph, PyTorch's
// "reduce-overhead" mode), the fork pulls the compute and communication streams into the
// caller's capture and the steps are enqueued there, not captured into a graph of our own (CUDA
// graphs do not nest by capture); every allocation and rendezvous happened at construction, so
// the captured work replays safely (signal state is replay-safe: Note [cuda all-reduce] in
// kernels/cuda/collectives/all_reduce.cu). Nothing waits on the host, so a failure surfaces later: a peer's
// failure (the world's failure flag) at the next run, a collective's timeout on the GPU at
// synchronize().
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
  input_ranges_.assign(p.inputs.size(), ByteRange{});
  std::vector<int> input_of(p.values.size(), -1);
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    if (staging_step_[i] >= 0) {
      handles_[i] = slots_[size_t(p.steps[size_t(staging_step_[i])].results[0])];
      skip_always_[size_t(staging_step_[i])] = true;
      slots_[size_t(p.inputs[i])] = handles_[i];
      continue;
    }
    input_of[size_t(p.inputs[i])] = int(i);
    const ir::TensorType& t = p.values[size_t(p.inputs[i])].type;
    const uintptr_t base = (uintptr_t(1) << 62) + i * (uintptr_t(1) << 44);  // 16 TiB apart
    const auto* lo = reinterpret_cast<const char*>(base);
    input_ranges_[i] = {lo, lo + size_t(numel(t.shape)) * dtype_size(t.dtype), false};
  }
  // Note [streams of a plan]
  auto range_of_slot = [&](int slot) -> ByteRange {
    if (input_of[size_t(slot)] >= 0) return input_ranges_[size_t(input_of[size_t(slot)])];
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
  device_streams_ = plan_streams(access, tunables().cuda_early_launch);
  find_replay_views();
  device_->prepare(device_streams_, collective_bytes);
  // No rank launches a collective before every peer finished preparing: on a shared GPU a peer
  // still creating its handles could otherwise wait behind that kernel (Note [ranks sharing a
  // GPU] in runtime/cuda/heap.cpp).
  for (const auto& [group, bytes] : collective_bytes) group->barrier(0, "Executable");
}

// Note [views after a replay]: the view steps whose results outputs or written-back values read,
// in step order.
void Executable::find_replay_views() {
  const passes::Plan& p = *plan_;
  std::vector<bool> read_after(p.values.size(), false);
  for (int v : p.outputs) read_after[size_t(v)] = true;
  for (const passes::Writeback& w : p.writebacks) read_after[size_t(w.value)] = true;
  replay_views_.clear();
  for (size_t s = steps_.size(); s-- > 0;) {
    const passes::PlanStep& ps = *steps_[s]->plan;
    if (skip_always_[s] || ps.kind != passes::StepKind::call || !ps.op.called()->has(Tag::view))
      continue;
    if (std::none_of(ps.results.begin(), ps.results.end(),
                     [&](int v) { return read_after[size_t(v)]; }))
      continue;
    replay_views_.push_back(s);
    for (const passes::Operand& a : steps_[s]->args) {
      if (a.kind == passes::Operand::Kind::value) read_after[size_t(a.value)] = true;
    }
  }
  std::reverse(replay_views_.begin(), replay_views_.end());
}

// Input i's device buffer (Note [device inputs]): the staging buffer, or one made on first use.
Tensor& Executable::device_handle(size_t i) {
  if (!handles_[i].defined()) {
    const ir::TensorType& t = plan_->values[size_t(plan_->inputs[i])].type;
    handles_[i] = Tensor::empty(t.shape, t.dtype, options_.device);
    ++allocations_;
  }
  return handles_[i];
}

// Binds each input's slot for this run (Note [device inputs]); copy_in[i]: copy it into its
// buffer before the steps. Returns the binding the backend keys its graphs by.
RunBinding Executable::bind_device_inputs(const std::vector<Tensor>& inputs,
                                          std::vector<bool>& copy_in,
                                          std::optional<void*> stream) {
  const passes::Plan& p = *plan_;
  RunBinding binding;
  binding.stream = stream;
  copy_in.assign(inputs.size(), false);
  std::vector<const char*> at(inputs.size(), nullptr);  // bound address of each non-staged input
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    const bool own_pool = std::find(pool_storages_.begin(), pool_storages_.end(),
                                    in.storage().get()) != pool_storages_.end();
    Tensor bound;
    if (staging_step_[i] < 0 && in.device() == options_.device && in.is_contiguous() && !own_pool) {
      bound = in;
    } else {
      bound = staging_step_[i] >= 0 ? handles_[i] : device_handle(i);
      copy_in[i] = !detail::same_memory(in, bound);
      if (!copy_in[i] && staging_step_[i] >= 0) ++stats_.input_copies_skipped;
    }
    slots_[size_t(p.inputs[i])] = bound;
    binding.key.push_back(bound.raw_data());
    if (staging_step_[i] < 0) at[i] = static_cast<const char*>(bound.raw_data());
  }
  if (binding.key != bound_key_ || bound_stable_.empty()) {  // a binding not seen last run
    bound_key_ = binding.key;
    bound_stable_.assign(device_streams_.size(), {});
    for (size_t s = 0; s < device_streams_.size(); ++s) {
      for (const ByteRange& r : device_streams_[s].stable) {
        ByteRange rebased = r;
        for (size_t i = 0; i < input_ranges_.size(); ++i) {
          const ByteRange& synthetic = input_ranges_[i];
          if (!at[i] || r.lo < synthetic.lo || r.hi > synthetic.hi) continue;
          rebased = {at[i] + (r.lo - synthetic.lo), at[i] + (r.hi - synthetic.lo), false};
        }
        bound_stable_[s].push_back(rebased);
      }
    }
  }
  binding.stable = &bound_stable_;
  return binding;
}

std::vector<Tensor> Executable::run_on_device(const std::vector<Tensor>& inputs,
                                              const RunOptions& options) {
  SF_CHECK(!options.on_step,
           "Executable::run: on_step times host steps, but on a GPU the steps are enqueued "
           "asynchronously (captured into a CUDA graph); time whole runs instead");
  // Note [caller's stream]: an asynchronous run never waits on the host, so a peer that failed
  // would be noticed only by a kernel's timeout on the GPU: ask the world's failure flag first.
  if (options.stream && communicates_) {
    if (auto f = runtime_->bootstrap().failure(); f && f->rank != runtime_->rank()) {
      throw_error(ErrorCode::PeerFailure,
                  "Executable::run: rank {} failed ({}) before rank {} ran program '{}' (on its "
                  "GPU, asynchronously)",
                  f->rank, f->what, runtime_->rank(), plan_->graph->name());
    }
  }
  restore_rebound_slots();  // after a run that raised
  std::vector<bool> copy_in;
  RunBinding binding = bind_device_inputs(inputs, copy_in, options.stream);
  bind_outputs(inputs, options, &binding.key);  // Note [outputs bound in place]
  note_output_key(binding.key);
  auto before = [&] {
    // Note [barrier before each run], as a kernel on the compute stream that the whole run (its
    // graph included) follows; outside the graph, so it runs every time.
    for (const auto& [group, op] : entry_barriers_)
      call_bound(*op, {Value(group->name()), Value(int64_t(0))});
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (copy_in[i]) copy(slots_[size_t(plan_->inputs[i])], inputs[i]);
    }
  };
  bool ran_steps = false;
  auto steps = [&] {
    const RunStats start = stats_;
    for (size_t s = 0; s < steps_.size(); ++s) {
      if (skip_always_[s]) continue;
      device_->begin_step(s);
      try {
        run_step(*steps_[s]);
      } catch (const Error& e) {  // which step failed: a kernel names its op, not the step
        const OpDef* op = steps_[s]->plan->op.called();
        throw Error(e.code(), fmt::format("step {} ({}): {}", s, op ? op->name() : "copy or fused",
                                          e.what()));
      }
      device_->end_step(s);
    }
    graph_stats_.copies = stats_.copies - start.copies;
    graph_stats_.bytes_copied = stats_.bytes_copied - start.bytes_copied;
    ran_steps = true;
  };
  std::vector<Tensor> results;
  auto after = [&] {
    if (!ran_steps) {  // Note [views after a replay]
      for (size_t s : replay_views_) run_step(*steps_[s]);
    }
    write_back(inputs);
    results = collect_outputs(options);
  };
  device_->run(before, steps, after, binding);
  restore_rebound_slots();
  if (!ran_steps) {  // a replay: the captured steps made the same copies
    stats_.copies += graph_stats_.copies;
    stats_.bytes_copied += graph_stats_.bytes_copied;
  }
  if (options.synchronize && !options.stream) device_->synchronize();
  return results;
}

void Executable::synchronize() {
  if (device_) device_->synchronize();
}

std::string Executable::device_description() const {
  return device_ ? device_->describe() : "cpu";
}

}  // namespace symmflow::exec
