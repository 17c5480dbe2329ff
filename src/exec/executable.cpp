// The executor. Contract: see include/symmflow/exec/executable.hpp. Construction binds the typed
// plan to this rank (pools, one slot per plan value with its planned buffer, rank-relative
// arguments resolved), so run() only moves tensors between slots and calls kernels.
//
// Note [zero-copy input binding]: a copy-in of a graph input (a copy step of kind
// CopyKind::input) writes a staging buffer that plan_memory keeps live from step 0, so no other
// buffer shares its bytes before the copy. input_handle() hands that buffer to the caller; when run()
// receives it back (same memory), the copy is skipped. This is only offered when no step writes
// the staging buffer, or when what it holds at the end is written back into that very input and
// the copy-in is the input's only reader (other steps read the caller's tensor, which would then
// be the staging buffer that a step or a peer writes), so the caller's tensor never changes in
// ways eager execution would not change it.
//
// Note [symmetric inputs bound in place]: an input whose caller tensor already lies in symmetric
// memory of the staging buffer's group, with its dtype, shape and strides (e.g. a tensor from
// empty_symmetric), is bound in place of the staging buffer for that run: the steps and the peers
// read the caller's memory, and the copy-in is skipped (RunStats::input_copies_skipped; explain
// still lists the planned copy-in, since the plan cannot know what callers bind). Peers address a
// symmetric tensor by its offset in its heap, so every rank must bind that way with the same heap
// and offset: the placement joins the rank agreement, and ranks that bind differently raise
// InvalidUsage on every rank naming the input. Offered only where input_handle would hand out the
// staging buffer (the rules above), where no other value lives in the staging buffer, on the host
// (a device plan's steps read fixed buffers, captured in a graph), and where the ranks agree (a
// world of one rank, or rank agreement on).
//
// Note [barrier before each run]: a buffer that peers write (the written symm arg of a
// communicating op: put_signal's dst, collective_permute_out's out, ...) has its op tagged
// peer_written (a one_sided op's is kept for the whole run: Note [peer-written buffers]), but nothing in
// the steps stops a fast rank from finishing run i and issuing run i+1's puts into a slow peer that is still reading run i's data
// from the same buffer (or has not consumed run i's signal yet). So run() starts with one barrier
// in each group that has such a buffer: no rank writes into a peer's memory before every peer
// has finished the previous run. emit_plan lists these groups (Plan::entry_barriers). Plans
// without peer-written buffers pay nothing.
#include "symmflow/exec/executable.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "exec/agreement.hpp"
#include "exec/executable_step.hpp"
#include "exec/util.hpp"
#include "symmflow/exec/fused.hpp"
#include "symmflow/exec/groups.hpp"
#include "symmflow/exec/step_profile.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::exec {

using passes::CopyKind;
using passes::Operand;
using passes::PlanStep;
using passes::StepKind;

Executable::Executable(std::shared_ptr<const passes::Plan> plan, ExecOptions options)
    : plan_(std::move(plan)), options_(options) {
  SF_CHECK(plan_ && plan_->graph, "Executable: no plan");
  if (options_.device.type != DeviceType::cpu) device_ = make_device_backend(options_);
  bind_runtime();
  agree_on_plan();
  make_groups();
  allocate_pools();
  bind_slots();
  bind_steps();
  find_staging_inputs();
  bind_entry_barriers();
  find_bindable_outputs();
  handles_.resize(plan_->inputs.size());
  snapshots_.resize(plan_->inputs.size());
  skip_copy_.assign(steps_.size(), false);
  if (device_) prepare_device();
}

// The calling rank's runtime (required when the plan communicates).
void Executable::bind_runtime() {
  communicates_ = detail::plan_communicates(*plan_);
  // Note [program steps in agreement] (src/runtime/agreement.cpp): never 0 (an eager call's).
  if (communicates_) program_ = std::max<uint64_t>(detail::plan_hash(*plan_), 1);
  runtime_ = communicates_ ? &Runtime::current() : Runtime::current_or_null();
}

// Note [rank agreement] (agreement.cpp): before the groups and heaps, so that ranks that compiled
// different programs are told what differs rather than which allocation sizes do.
void Executable::agree_on_plan() {
  if (!communicates_ || runtime_->world_size() == 1 || !tunables().rank_agreement) return;
  agreement_ = std::make_unique<detail::RankAgreement>(*plan_, runtime_->bootstrap());
  agreement_->agree_on_plan("Executable");
}

// The graph's groups on this runtime, when the plan communicates.
void Executable::make_groups() {
  if (!communicates_) return;
  detail::check_world(*plan_->graph, runtime_->world_size(), "Executable");
  ensure_groups(*plan_->graph, *runtime_);
}

// Pools: one host allocation, one heap per symm pool (collective, in plan order); a view of
// every planned buffer.
void Executable::allocate_pools() {
  heaps_.resize(plan_->pools.size());
  size_t regular_bytes = 0;
  for (const passes::PoolPlan& p : plan_->pools) {
    if (p.layout.pool != ir::Pool::symm) regular_bytes = std::max(regular_bytes, p.bytes);
  }
  regular_ = device_ ? device_->allocate(std::max<size_t>(regular_bytes, 64))
                     : Storage::allocate_host(std::max<size_t>(regular_bytes, 64));
  pool_storages_.push_back(regular_.get());
  ++allocations_;
  pool_storage_.assign(plan_->pools.size(), regular_);
  for (size_t i = 0; i < plan_->pools.size(); ++i) {
    const passes::PoolPlan& p = plan_->pools[i];
    if (p.layout.pool != ir::Pool::symm) continue;
    const size_t bytes = std::max<size_t>(p.bytes, 64);
    if (device_) {
      pool_storage_[i] = device_->allocate_symmetric(runtime_->group(p.layout.group), bytes);
    } else {
      heaps_[i] = SymmetricHeap::allocate(runtime_->group(p.layout.group), bytes, "Executable");
      pool_storage_[i] = std::make_shared<SymmetricStorage>(heaps_[i]);
    }
    pool_storages_.push_back(pool_storage_[i].get());
    ++allocations_;
  }
  buffer_views_.resize(plan_->buffers.size());
  for (size_t b = 0; b < plan_->buffers.size(); ++b) {
    const passes::BufferPlan& bp = plan_->buffers[b];
    if (bp.pool < 0) continue;
    buffer_views_[b] = Tensor::from_storage(pool_storage_[size_t(bp.pool)], bp.offset,
                                            bp.type.dtype, bp.type.shape);
  }
}

// One slot per plan value, preset with its planned buffer; the others (graph inputs, views) are
// set per run and cleared after it.
void Executable::bind_slots() {
  slots_.resize(plan_->values.size());
  for (size_t v = 0; v < plan_->values.size(); ++v) {
    int b = plan_->values[v].buffer;
    if (b >= 0) slots_[v] = buffer_views_[size_t(b)];
    if (!slots_[v].defined()) transient_slots_.push_back(int(v));
  }
}

// Note [rank-relative arguments] (ir/graph.hpp): resolved once, here, for this rank.
void Executable::bind_steps() {
  for (const PlanStep& ps : plan_->steps) {
    auto step = std::make_unique<Step>();
    step->plan = &ps;
    step->args = ps.args;
    for (Operand& a : step->args) {
      if (a.kind != Operand::Kind::rank_relative) continue;
      SF_CHECK(runtime_ && !ps.group.empty(),
               "Executable: {} has a rank-relative argument ({}) but no group",
               ps.node->display_name(), ir::rank_relative_text(a.rank_offset));
      const Group& group = *runtime_->group(ps.group);
      a.literal = ir::resolve_rank_relative(a.rank_offset, group.rank(), group.size());
      a.kind = Operand::Kind::literal;
    }
    if (ps.kind == StepKind::functional) {
      for (auto [arg, value] : ps.new_values) {
        SF_CHECK(ps.args[size_t(arg)].kind == Operand::Kind::value,
                 "Executable: {} writes a tensor list (unsupported)", ps.node->display_name());
      }
    }
    steps_.push_back(std::move(step));
  }
}

// Zero-copy eligibility (Note [zero-copy input binding]).
void Executable::find_staging_inputs() {
  const passes::Plan& p = *plan_;
  auto root = [&](int b) {
    while (p.buffers[size_t(b)].alias_of >= 0) b = p.buffers[size_t(b)].alias_of;
    return b;
  };
  std::vector<bool> written(p.buffers.size(), false);  // root buffers some step writes
  std::vector<int> uses(p.values.size(), 0);
  auto each_value = [](const Operand& o, auto&& f) {
    if (o.kind == Operand::Kind::value) f(o.value);
    for (int v : o.values) f(v);
  };
  for (const PlanStep& s : p.steps) {
    for (const Operand& o : s.args) each_value(o, [&](int v) { ++uses[size_t(v)]; });
    if (s.kind != StepKind::call || s.op.out_variant) continue;
    for (int w : s.written) {
      each_value(s.args[size_t(w)], [&](int v) {
        const int b = p.values[size_t(v)].buffer;
        if (b >= 0) written[size_t(root(b))] = true;
      });
    }
  }
  staging_step_.assign(p.inputs.size(), -1);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const PlanStep& step = p.steps[s];
    if (step.copy != CopyKind::input) continue;
    int input = p.values[size_t(step.args[0].value)].graph_input;
    if (input >= 0 && staging_step_[size_t(input)] < 0) staging_step_[size_t(input)] = int(s);
  }
  for (size_t i = 0; i < staging_step_.size(); ++i) {
    if (staging_step_[i] < 0) continue;
    const int staged = p.steps[size_t(staging_step_[i])].results[0];
    bool written_back = false;
    for (const passes::Writeback& w : p.writebacks)
      written_back |= w.input == int(i) && w.value == staged;
    // A step that writes the staging buffer would change what other readers of the input see.
    bool only_staged = uses[size_t(p.inputs[i])] == 1;
    if (written[size_t(root(p.values[size_t(staged)].buffer))] && (!written_back || !only_staged))
      staging_step_[i] = -1;
  }
  // Note [symmetric inputs bound in place]: the staging buffer holds the staged value alone.
  std::vector<int> values_in(p.buffers.size(), 0);
  for (const auto& v : p.values)
    if (v.buffer >= 0) ++values_in[size_t(root(v.buffer))];
  bind_in_place_.assign(p.inputs.size(), false);
  for (size_t i = 0; i < staging_step_.size(); ++i) {
    if (staging_step_[i] < 0 || device_) continue;
    const int b = p.values[size_t(p.steps[size_t(staging_step_[i])].results[0])].buffer;
    bind_in_place_[i] = b >= 0 && root(b) == b && values_in[size_t(b)] == 1 &&
                        buffer_views_[size_t(b)].is_symmetric();
  }
}

std::string Executable::in_place_placement(size_t i, const Tensor& t) const {
  if (i >= bind_in_place_.size() || !bind_in_place_[i] || !t.defined() || !t.is_symmetric())
    return "";
  if (!agreement_ && (!runtime_ || runtime_->world_size() > 1)) return "";
  const passes::Plan& p = *plan_;
  const int staged = p.steps[size_t(staging_step_[i])].results[0];
  const Tensor& staging = buffer_views_[size_t(p.values[size_t(staged)].buffer)];
  if (t.dtype() != staging.dtype() || t.shape() != staging.shape() ||
      t.strides() != staging.strides() || detail::same_memory(t, staging))
    return "";
  // Memory of this plan (an output view fed back) is overwritten by the steps: snapshot it.
  if (std::find(pool_storages_.begin(), pool_storages_.end(), t.storage().get()) !=
      pool_storages_.end())
    return "";
  const auto* mine = dynamic_cast<const SymmetricStorage*>(t.storage().get());
  const auto* theirs = dynamic_cast<const SymmetricStorage*>(staging.storage().get());
  if (!mine || !theirs || mine->heap()->group() != theirs->heap()->group()) return "";
  return fmt::format("symmetric heap {} of group '{}' at byte {}", mine->heap()->seq(),
                     mine->heap()->group()->name(), t.offset_bytes());
}

void Executable::restore_rebound_slots() {
  for (int v : rebound_slots_)
    slots_[size_t(v)] = buffer_views_[size_t(plan_->values[size_t(v)].buffer)];
  rebound_slots_.clear();
}

void Executable::bind_entry_barriers() {
  for (const passes::EntryBarrier& b : plan_->entry_barriers)
    entry_barriers_.push_back({runtime_->group(b.group).get(), b.op});
}

Executable::~Executable() = default;

// Note [rank agreement] (agreement.cpp).
void Executable::agree_on_inputs(const std::vector<Tensor>& inputs) {
  if (!agreement_) return;
  std::vector<std::string> placements;  // Note [symmetric inputs bound in place]
  for (size_t i = 0; i < inputs.size() && !device_; ++i)
    placements.push_back(in_place_placement(i, inputs[i]));
  agreement_->agree_on_inputs(inputs, "run", placements);
}

size_t Executable::agreement_exchanges() const {
  return agreement_ ? agreement_->exchanges() : 0;
}

Tensor Executable::input_handle(size_t i) {
  const passes::Plan& p = *plan_;
  SF_CHECK(i < p.inputs.size(), "input_handle: graph '{}' has {} inputs, no input #{}",
           p.graph->name(), p.inputs.size(), i);
  if (device_) return device_handle(i);  // Note [device inputs] (executable_device.cpp)
  if (staging_step_[i] >= 0) return slots_[size_t(p.steps[size_t(staging_step_[i])].results[0])];
  if (!handles_[i].defined()) {
    const ir::TensorType& t = p.values[size_t(p.inputs[i])].type;
    handles_[i] = Tensor::empty(t.shape, t.dtype);
  }
  return handles_[i];
}

Tensor Executable::existing_input_handle(size_t i) const {
  SF_CHECK(i < plan_->inputs.size(), "input_handle: the plan has {} inputs, not {}",
           plan_->inputs.size(), i + 1);
  if (!device_ && staging_step_[i] >= 0)
    return slots_[size_t(plan_->steps[size_t(staging_step_[i])].results[0])];
  return handles_[i];
}

Tensor Executable::buffer(const std::string& name) const {
  int v = plan_->find_value(name);
  int b = v >= 0 ? plan_->values[size_t(v)].buffer : -1;
  SF_CHECK(b >= 0 && buffer_views_[size_t(b)].defined(),
           "Executable: value '{}' has no planned memory", name);
  return buffer_views_[size_t(b)];
}

void Executable::copy(const Tensor& dst, const Tensor& src) {
  detail::copy_tensor(dst, src);
  ++stats_.copies;
  stats_.bytes_copied += dst.nbytes();
}

void Executable::run_step(Step& step) {
  const PlanStep& ps = *step.plan;
  switch (ps.kind) {
    case StepKind::copy:
      copy(slots_[size_t(ps.results[0])], slots_[size_t(step.args[0].value)]);
      return;
    case StepKind::fused: {
      std::vector<Tensor> ins, outs;
      for (const Operand& a : step.args) ins.push_back(slots_[size_t(a.value)]);
      for (int v : ps.results) outs.push_back(slots_[size_t(v)]);
      if (device_) {
        device_->run_fused(*ps.body, ins, outs);
      } else {
        if (!step.fused) step.fused = std::make_unique<FusedProgram>(*ps.body);
        stats_.prepared_fused += step.fused->run(ins, outs);  // Note [fused programs prepared once]
      }
      return;
    }
    case StepKind::call:
    case StepKind::functional:
      run_call(step);
      return;
  }
}

// Note [launch records]: a call step is prepared once, at its first call, and launched from its
// record afterwards (as XLA's thunks and NCCL's device handles are): the bound argument vector
// with every literal already in place (rank-relative ones resolved by bind_steps), the results'
// vector, and the kernel of the device its tensors live on, keyed by one operand on that device (a
// GPU tensor rather than a host scalar beside it). A call then assigns the operands' tensors from
// their slots into the record, presets the planned results and calls the kernel: no argument
// vector is built, no device is searched, no kernel is looked up in the registry. A later call
// whose keying operand lives on another device resolves the kernel again. Tensors are released
// from the record when each call ends, normally or not, so it keeps no caller memory alive; they
// keep their shape and strides' capacity, so the next call's assignments allocate nothing
// (Tensor::release). The kernel keeps what it resolves from its literals in the record too
// (KernelCall::state: a collective's group and reduce op, Note [prepared collectives] in
// kernels/cpu/collectives/args.hpp), dropped when the kernel changes.
void Executable::prepare_call(Step& step) {
  step.bound.clear();
  step.bound.reserve(step.args.size());
  for (size_t i = 0; i < step.args.size(); ++i) {
    const Operand& a = step.args[i];
    if (a.kind == Operand::Kind::value) {
      if (step.keyed_by < 0) step.keyed_by = int(i);
      step.bound.emplace_back(Tensor());
    } else if (a.kind == Operand::Kind::value_list) {
      step.bound.emplace_back(std::vector<Tensor>());
    } else {
      step.bound.push_back(a.literal);
    }
  }
  step.prepared = true;
}

// An op call (Note [launch records]): operands from their slots; functional<op> first copies its
// written operands into their new values; fresh results are written into their planned buffers
// (an out variant takes them as its out args), views and in-place results are taken from the
// kernel.
void Executable::run_call(Step& step) {
  const PlanStep& ps = *step.plan;
  if (!step.prepared) prepare_call(step);
  struct ClearTensors {  // keep no tensor alive past the call (Note [launch records])
    Step& step;
    ~ClearTensors() {
      for (size_t i = 0; i < step.args.size(); ++i) {
        const Operand::Kind kind = step.args[i].kind;
        if (kind == Operand::Kind::value) step.bound[i].release_tensor();  // capacity kept
        if (kind == Operand::Kind::value_list) step.bound[i] = std::vector<Tensor>();
      }
      for (Value& out : step.outs) out.release_tensor();
    }
  } clear{step};
  std::vector<Value>& bound = step.bound;
  for (size_t i = 0; i < step.args.size(); ++i) {
    const Operand& a = step.args[i];
    if (a.kind == Operand::Kind::value) {
      bound[i].set_tensor(slots_[size_t(a.value)]);  // no allocation (Tensor::release)
    } else if (a.kind == Operand::Kind::value_list) {  // rare (cat, stack): built per call
      std::vector<Tensor> ts;
      ts.reserve(a.values.size());
      for (int v : a.values) ts.push_back(slots_[size_t(v)]);
      bound[i] = std::move(ts);
    }
  }
  for (auto [arg, value] : ps.new_values) {  // functional<op>: write copies of the args
    copy(slots_[size_t(value)], bound[size_t(arg)].to_tensor());
    bound[size_t(arg)].set_tensor(slots_[size_t(value)]);
  }
  const OpDef& op = *ps.op.called();
  std::vector<Value>& outs = step.outs;
  if (ps.op.out_variant) {
    outs.clear();
  } else {
    outs.resize(ps.results.size() - ps.new_values.size());  // one per result, list elements too
    for (size_t r = 0; r < outs.size(); ++r) {
      const Tensor& planned = slots_[size_t(ps.results[r])];
      if (ps.kind == StepKind::functional ||
          (ps.result_aliases[r] < 0 && planned.defined())) {
        outs[r].set_tensor(planned);
      } else {
        outs[r] = Value();  // the kernel allocates it, or sets the view it returns
      }
    }
  }
  if (step.keyed_by < 0 || !bound[size_t(step.keyed_by)].to_tensor().defined()) {
    // No tensor operand (a factory, a barrier): the kernel is found per call, where a preset
    // output or the thread's device says; what it resolves from its literals stays in the record
    // while the kernel does (a barrier's group, Note [prepared collectives]).
    Device device;
    const Kernel& kernel = kernel_for(op, bound, outs, device);
    if (&kernel != step.kernel || device != step.device) {
      step.kernel = &kernel;
      step.device = device;
      step.kernel_state.reset();
    }
    const bool had_state = step.kernel_state != nullptr;
    call_kernel_into(op, kernel, device, bound, outs, &step.kernel_state);
    stats_.prepared_states += had_state;
  } else {
    const Device device = bound[size_t(step.keyed_by)].to_tensor().device();
    if (!step.kernel || device != step.device) {
      step.kernel = &kernel_for(op, bound, outs, step.device);
      step.kernel_state.reset();
      // Keyed by an operand on the device that chose the kernel (a GPU one among host scalars).
      for (size_t i = 0; i < bound.size(); ++i) {
        if (bound[i].is_tensor() && bound[i].to_tensor().defined() &&
            bound[i].to_tensor().device() == step.device) {
          step.keyed_by = int(i);
          break;
        }
      }
    }
    const bool had_state = step.kernel_state != nullptr;
    call_kernel_into(op, *step.kernel, step.device, bound, outs, &step.kernel_state);
    ++stats_.prepared_calls;
    stats_.prepared_states += had_state;
  }
  for (size_t r = 0; r < outs.size(); ++r) slots_[size_t(ps.results[r])] = outs[r].to_tensor();
}

// Graph inputs into their slots (Note [zero-copy input binding]; snapshots of inputs that live in
// this plan's pools).
void Executable::bind_inputs(const std::vector<Tensor>& inputs) {
  restore_rebound_slots();  // after a run that raised
  for (size_t i = 0; i < inputs.size(); ++i) {
    const size_t slot = size_t(plan_->inputs[i]);
    slots_[slot] = inputs[i];
    if (staging_step_[i] >= 0) {
      const size_t s = size_t(staging_step_[i]);
      const int staged = plan_->steps[s].results[0];
      skip_copy_[s] = detail::same_memory(inputs[i], slots_[size_t(staged)]);
      if (!skip_copy_[s] && !in_place_placement(i, inputs[i]).empty()) {
        slots_[size_t(staged)] = inputs[i];  // Note [symmetric inputs bound in place]
        rebound_slots_.push_back(staged);
        skip_copy_[s] = true;
      }
      if (skip_copy_[s]) continue;
    }
    // An input in this plan's pools (e.g. an output view of the previous run fed back) would be
    // overwritten by the steps while still needed: read it from a snapshot instead.
    if (std::find(pool_storages_.begin(), pool_storages_.end(), inputs[i].storage().get()) !=
        pool_storages_.end()) {
      if (!snapshots_[i].defined())
        snapshots_[i] = Tensor::empty(inputs[i].shape(), inputs[i].dtype());
      copy(snapshots_[i], inputs[i]);
      slots_[slot] = snapshots_[i];
    }
  }
}

void Executable::write_back(const std::vector<Tensor>& inputs) {
  for (const passes::Writeback& w : plan_->writebacks) {
    const Tensor& value = slots_[size_t(w.value)];
    if (!detail::same_memory(inputs[size_t(w.input)], value)) copy(inputs[size_t(w.input)], value);
  }
}

std::vector<Tensor> Executable::run(const std::vector<Tensor>& inputs, const RunOptions& options) {
  agree_on_inputs(inputs);
  detail::check_inputs(*plan_->graph, inputs, "run");
  stats_ = {};
  if (device_) return run_on_device(inputs, options);
  SF_CHECK(!options.stream, "run: program '{}' runs on the cpu; a stream orders GPU runs only",
           plan_->graph->name());
  ThreadDeviceGuard on_host(Device::cpu());  // a barrier step is a host barrier here
  for (const auto& barrier : entry_barriers_)  // Note [barrier before each run]
    barrier.first->barrier(0, "Executable::run");
  bind_inputs(inputs);
  bind_outputs(inputs, options, nullptr);  // Note [outputs bound in place]
  const bool profiled = tunables().step_profile;  // Note [step profile]
  for (size_t s = 0; s < steps_.size(); ++s) {
    if (skip_copy_[s]) {
      ++stats_.input_copies_skipped;
      skip_copy_[s] = false;
      continue;
    }
    // Note [program steps in agreement]: the step's collectives say which program and step.
    ProgramStepScope in_step({program_, int64_t(s), plan_->graph->name()});
    if (!options.on_step && !profiled) {
      run_step(*steps_[s]);
      continue;
    }
    auto begin = std::chrono::steady_clock::now();
    run_step(*steps_[s]);
    auto end = std::chrono::steady_clock::now();
    if (profiled) {
      Step& step = *steps_[s];
      if (step.profile_label.empty()) step.profile_label = step_label(*step.plan);
      record_step_time(step.profile_label,
                       std::chrono::duration<double, std::micro>(end - begin).count());
    }
    if (options.on_step) options.on_step(s, begin, end);
  }
  write_back(inputs);
  std::vector<Tensor> results = collect_outputs(options);
  for (int slot : transient_slots_) slots_[size_t(slot)] = Tensor();  // keep no caller memory alive
  restore_rebound_slots();
  return results;
}

std::vector<Tensor> Executable::collect_outputs(const RunOptions& options) {
  std::vector<Tensor> results;
  results.reserve(plan_->outputs.size());
  SF_CHECK(options.into.empty() || options.into.size() == plan_->outputs.size(),
           "run: {} destinations for the {} outputs of program '{}'", options.into.size(),
           plan_->outputs.size(), plan_->graph->name());
  for (size_t o = 0; o < plan_->outputs.size(); ++o) {
    const Tensor& t = slots_[size_t(plan_->outputs[o])];
    if (!options.into.empty()) {
      const Tensor& dst = options.into[o];
      SF_CHECK(dst.shape() == t.shape() && dst.dtype() == t.dtype(),
               "run: output {} of program '{}' is {}{}, its destination is {}{}", o,
               plan_->graph->name(), dtype_name(t.dtype()), shape_str(t.shape()),
               dtype_name(dst.dtype()), shape_str(dst.shape()));
      if (!detail::same_memory(dst, t)) {
        detail::copy_tensor(dst, t);
        ++stats_.output_copies;
        stats_.output_bytes += t.nbytes();
      }
      results.push_back(dst);
    } else if (options.output_mode == OutputMode::view) {
      results.push_back(t);
    } else {
      results.push_back(detail::clone_tensor(t));
      ++stats_.output_copies;
      stats_.output_bytes += t.nbytes();
    }
  }
  return results;
}

}  // namespace symmflow::exec
