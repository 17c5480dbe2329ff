// The executor. Contract: see include/symmflow/exec/executable.hpp. Construction precompiles each
// step (argument slots, planned output buffers, the op to call), so run() only moves tensors
// between slots and calls kernels.
//
// Note [zero-copy input binding]: a copy-in of a graph input (copy node, attrs["copy"] ==
// "input") writes a staging buffer that plan_memory keeps live from step 0, so no other buffer
// shares its bytes before the copy. input_handle() hands that buffer to the caller; when run()
// receives it back (same memory), the copy is skipped. This is only offered when no step writes
// the staging buffer, or when what it holds at the end is written back into that very input and
// the copy-in is the input's only reader (other steps read the caller's tensor, which would then
// be the staging buffer that a step or a peer writes), so the caller's tensor never changes in
// ways eager execution would not change it.
//
// Note [barrier before each run]: a buffer that peers write (the written symm arg of a
// communicating op: put_signal's dst, collective_permute_out's out, ...) is kept for the whole run
// by plan_memory (Note [peer-written buffers]), but nothing in the steps stops a fast rank from
// finishing run i and issuing run i+1's puts into a slow peer that is still reading run i's data
// from the same buffer (or has not consumed run i's signal yet). So run() starts with one barrier
// in each group that has such a buffer: no rank writes into a peer's memory before every peer
// has finished the previous run. Plans without peer-written buffers pay nothing.
#include "symmflow/exec/executable.hpp"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "exec/executable_step.hpp"
#include "exec/util.hpp"
#include "symmflow/exec/fused.hpp"
#include "symmflow/exec/groups.hpp"
#include "symmflow/ops/call.hpp"

namespace symmflow::exec {

namespace {

// Whether peers write one of n's buffers: n is an op (or functional<op>) with a group that
// writes one of its symm args (Note [barrier before each run]).
bool writes_symm_arg(const ir::Node& n) {
  if (!n.op() || n.group().empty()) return false;
  const OpDef& op = *n.op();
  for (int w : op.aliases().written_args) {
    const std::string& name = op.schema().args[size_t(w)].name;
    if (std::find(op.symm_args().begin(), op.symm_args().end(), name) != op.symm_args().end())
      return true;
  }
  return false;
}

}  // namespace

Executable::Executable(std::shared_ptr<const passes::Plan> plan, ExecOptions options)
    : plan_(std::move(plan)), options_(options) {
  SF_CHECK(plan_ && plan_->graph, "Executable: no plan");
  if (options_.device.type != DeviceType::cpu) device_ = make_device_backend(options_);
  const ir::Graph& g = *plan_->graph;
  bool communicates = false;
  for (const passes::PoolPlan& p : plan_->pools) communicates |= p.layout.pool == ir::Pool::symm;
  for (const ir::Node* n : plan_->steps) communicates |= !n->group().empty();
  runtime_ = Runtime::current_or_null();
  if (communicates) {
    runtime_ = &Runtime::current();
    detail::check_world(g, runtime_->world_size(), "Executable");
    ensure_groups(g, *runtime_);
  }

  // Pools: one host allocation, one heap per symm pool (collective, in plan order).
  heaps_.resize(plan_->pools.size());
  size_t regular_bytes = 0;
  for (const passes::PoolPlan& p : plan_->pools) {
    if (p.layout.pool != ir::Pool::symm) regular_bytes = std::max(regular_bytes, p.bytes);
  }
  regular_ = device_ ? device_->allocate(std::max<size_t>(regular_bytes, 64))
                    : Storage::allocate_host(std::max<size_t>(regular_bytes, 64));
  pool_storages_.push_back(regular_.get());
  ++allocations_;
  std::vector<std::shared_ptr<Storage>> symm_storage(plan_->pools.size());
  for (size_t i = 0; i < plan_->pools.size(); ++i) {
    const passes::PoolPlan& p = plan_->pools[i];
    if (p.layout.pool != ir::Pool::symm) continue;
    if (device_) {
      symm_storage[i] = device_->allocate_symmetric(runtime_->group(p.layout.group),
                                                    std::max<size_t>(p.bytes, 64));
    } else {
      heaps_[i] = SymmetricHeap::allocate(runtime_->group(p.layout.group),
                                          std::max<size_t>(p.bytes, 64), "Executable");
      symm_storage[i] = std::make_shared<SymmetricStorage>(heaps_[i]);
    }
    pool_storages_.push_back(symm_storage[i].get());
    ++allocations_;
  }
  buffer_views_.resize(plan_->buffers.size());
  for (size_t b = 0; b < plan_->buffers.size(); ++b) {
    const passes::BufferPlan& bp = plan_->buffers[b];
    if (bp.pool < 0) continue;
    const auto& storage = symm_storage[size_t(bp.pool)] ? symm_storage[size_t(bp.pool)] : regular_;
    buffer_views_[b] = Tensor::from_storage(storage, bp.offset, bp.type.dtype, bp.type.shape);
  }

  // Slots: graph inputs, then every node output; planned buffers preset.
  std::unordered_map<const ir::Value*, int> slot_of;
  auto new_slot = [&](const ir::Value* v) {
    int s = int(slots_.size());
    slot_of[v] = s;
    slot_value_.push_back(v);
    auto b = plan_->buffer_of.find(v);
    slots_.push_back(b != plan_->buffer_of.end() ? buffer_views_[size_t(b->second)] : Tensor());
    return s;
  };
  for (const ir::Value* v : g.inputs()) input_slot_.push_back(new_slot(v));
  std::vector<bool> written(plan_->buffers.size(), false);  // root buffers some step writes
  auto mark_written = [&](const ir::Value* v) {
    auto it = plan_->buffer_of.find(v);
    if (it == plan_->buffer_of.end()) return;
    int b = it->second;
    while (plan_->buffers[size_t(b)].alias_of >= 0) b = plan_->buffers[size_t(b)].alias_of;
    written[size_t(b)] = true;
  };
  // Note [rank-relative arguments] (ir/graph.hpp): resolved once, here, for this rank.
  auto literal_of = [&](const ir::Node* n, const ir::Arg& a) -> Value {
    if (a.kind != ir::Arg::Kind::rank_relative) return a.literal;
    SF_CHECK(runtime_ && !n->group().empty(),
             "Executable: {} has a rank-relative argument ({}) but no group", n->display_name(),
             ir::rank_relative_text(a.rank_offset));
    const Group& group = *runtime_->group(n->group());
    return ir::resolve_rank_relative(a.rank_offset, group.rank(), group.size());
  };
  const ir::Node* current = nullptr;  // the node whose args ref() binds
  auto ref = [&](const ir::Arg& a) {
    ArgRef r;
    r.kind = a.kind == ir::Arg::Kind::rank_relative ? ir::Arg::Kind::literal : a.kind;
    if (a.kind == ir::Arg::Kind::value) r.slot = slot_of.at(a.value);
    for (const ir::Value* v : a.values) r.slots.push_back(slot_of.at(v));
    if (r.kind == ir::Arg::Kind::literal) r.literal = literal_of(current, a);
    return r;
  };
  std::vector<std::string> barrier_groups;  // Note [barrier before each run]
  staging_step_.assign(g.inputs().size(), -1);
  for (size_t s = 0; s < plan_->steps.size(); ++s) {
    const ir::Node* n = plan_->steps[s];
    auto step = std::make_unique<Step>();
    step->node = n;
    step->op = n->op();
    current = n;
    for (const ir::Arg& a : n->args()) step->args.push_back(ref(a));
    for (const ir::Value* v : n->outputs()) step->out_slots.push_back(new_slot(v));
    if (n->kind() == ir::NodeKind::op) {
      const auto& aliases = n->op()->aliases();
      for (size_t r = 0; r < n->outputs().size(); ++r)
        step->alias_return.push_back(aliases.returns_alias[r] >= 0);
      for (int w : aliases.written_args) {
        const ir::Arg& a = n->args()[size_t(w)];
        if (a.kind == ir::Arg::Kind::value) mark_written(a.value);
        for (const ir::Value* v : a.values) mark_written(v);
      }
      auto ov = n->attrs().find("out_variant");
      if (ov != n->attrs().end()) {
        // Bind the out variant: the node's args by name, the k-th out arg = the k-th return.
        const OpDef& out_op = Registry::global().get(ov->second);
        const auto& out_args = out_op.aliases().out_args;
        SF_CHECK(out_args.size() == n->outputs().size(),
                 "Executable: {} has {} results but its out variant {} has {} out arguments",
                 n->display_name(), n->outputs().size(), out_op.name(), out_args.size());
        std::vector<ArgRef> args(out_op.schema().args.size());
        KwArgs known;
        for (size_t j = 0; j < out_op.schema().args.size(); ++j) {
          const std::string& name = out_op.schema().args[j].name;
          auto k = std::find(out_args.begin(), out_args.end(), int(j));
          if (k != out_args.end()) {
            size_t r = size_t(k - out_args.begin());
            args[j].kind = ir::Arg::Kind::value;
            args[j].slot = step->out_slots[r];
            known.push_back({name, ir::meta_of(n->output(r)->type())});
            continue;
          }
          int i = n->op()->schema().arg_index(name);
          if (i < 0) continue;  // defaulted below
          args[j] = ref(n->args()[size_t(i)]);
          const ir::Arg& a = n->args()[size_t(i)];
          if (a.kind == ir::Arg::Kind::literal || a.kind == ir::Arg::Kind::rank_relative)
            known.push_back({name, args[j].literal});
          else if (a.kind == ir::Arg::Kind::value)
            known.push_back({name, ir::meta_of(a.value->type())});
          else {
            std::vector<Tensor> metas;
            for (const ir::Value* v : a.values) metas.push_back(ir::meta_of(v->type()));
            known.push_back({name, std::move(metas)});
          }
        }
        std::vector<Value> defaults = bind_args(out_op, {}, known);  // fills the rest
        for (size_t j = 0; j < args.size(); ++j) {
          if (args[j].kind == ir::Arg::Kind::literal && args[j].literal.is_none())
            args[j].literal = defaults[j];
        }
        step->op = &out_op;
        step->out_variant = true;
        step->args = std::move(args);
        for (size_t r = 0; r < n->outputs().size(); ++r) step->alias_return[r] = false;
      }
    } else if (n->kind() == ir::NodeKind::functional) {
      size_t returns = n->op()->schema().returns.size();
      const auto& w = n->op()->aliases().written_args;
      for (size_t j = 0; j < w.size(); ++j) {
        SF_CHECK(n->args()[size_t(w[j])].kind == ir::Arg::Kind::value,
                 "Executable: {} writes a tensor list (unsupported)", n->display_name());
        step->new_values.push_back({size_t(w[j]), step->out_slots[returns + j]});
      }
    } else if (n->kind() == ir::NodeKind::copy) {
      auto kind = n->attrs().find("copy");
      const ir::Value* src = n->args()[0].value;
      if (kind != n->attrs().end() && kind->second == "input" && src->is_input() &&
          staging_step_[size_t(src->index())] < 0)
        staging_step_[size_t(src->index())] = int(s);
    }
    if (writes_symm_arg(*n) &&
        std::find(barrier_groups.begin(), barrier_groups.end(), n->group()) == barrier_groups.end())
      barrier_groups.push_back(n->group());
    steps_.push_back(std::move(step));
  }
  for (const std::string& name : barrier_groups)
    entry_barriers_.push_back(runtime_->group(name).get());
  for (const ir::Value* v : g.outputs()) output_slot_.push_back(slot_of.at(v));
  for (const auto& w : g.writebacks())
    writebacks_.push_back({w.input->index(), slot_of.at(w.value)});
  // Zero-copy eligibility (Note [zero-copy input binding]).
  for (size_t i = 0; i < staging_step_.size(); ++i) {
    if (staging_step_[i] < 0) continue;
    const ir::Value* staged = plan_->steps[size_t(staging_step_[i])]->output();
    int b = plan_->buffer_of.at(staged);
    bool written_back = false;
    for (const auto& w : g.writebacks())
      written_back |= w.input == g.inputs()[i] && w.value == staged;
    // A step that writes the staging buffer would change what other readers of the input see.
    const ir::Node* stage = plan_->steps[size_t(staging_step_[i])];
    bool only_staged = std::all_of(g.inputs()[i]->uses().begin(), g.inputs()[i]->uses().end(),
                                   [stage](const ir::Node* u) { return u == stage; });
    if (written[size_t(b)] && (!written_back || !only_staged)) staging_step_[i] = -1;
  }
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (!slots_[s].defined()) transient_slots_.push_back(int(s));
  }
  handles_.resize(g.inputs().size());
  snapshots_.resize(g.inputs().size());
  skip_copy_.assign(steps_.size(), false);
  if (device_) prepare_device();
}

Executable::~Executable() = default;

Tensor Executable::input_handle(size_t i) {
  const ir::Graph& g = *plan_->graph;
  SF_CHECK(i < g.inputs().size(), "input_handle: graph '{}' has {} inputs, no input #{}", g.name(),
           g.inputs().size(), i);
  if (device_) return handles_[i];  // the fixed device buffer the steps read (executable_device)
  if (staging_step_[i] >= 0) return slots_[size_t(steps_[size_t(staging_step_[i])]->out_slots[0])];
  if (!handles_[i].defined())
    handles_[i] = Tensor::empty(g.inputs()[i]->type().shape, g.inputs()[i]->type().dtype);
  return handles_[i];
}

Tensor Executable::buffer(const std::string& name) const {
  const ir::Value* v = plan_->graph->find_value(name);
  auto it = v ? plan_->buffer_of.find(v) : plan_->buffer_of.end();
  SF_CHECK(it != plan_->buffer_of.end() && buffer_views_[size_t(it->second)].defined(),
           "Executable: value '{}' has no planned memory", name);
  return buffer_views_[size_t(it->second)];
}

void Executable::copy(const Tensor& dst, const Tensor& src) {
  detail::copy_tensor(dst, src);
  ++stats_.copies;
  stats_.bytes_copied += dst.nbytes();
}

void Executable::run_step(const Step& step) {
  const ir::Node& n = *step.node;
  auto arg_value = [&](const ArgRef& a) -> Value {
    switch (a.kind) {
      case ir::Arg::Kind::value:
        return slots_[size_t(a.slot)];
      case ir::Arg::Kind::value_list: {
        std::vector<Tensor> ts;
        for (int s : a.slots) ts.push_back(slots_[size_t(s)]);
        return ts;
      }
      case ir::Arg::Kind::literal:
      case ir::Arg::Kind::rank_relative:  // resolved to a literal when the step was bound
        return a.literal;
    }
    return None{};
  };
  switch (n.kind()) {
    case ir::NodeKind::copy:
      copy(slots_[size_t(step.out_slots[0])], slots_[size_t(step.args[0].slot)]);
      return;
    case ir::NodeKind::fused: {
      std::vector<Tensor> ins, outs;
      for (const ArgRef& a : step.args) ins.push_back(slots_[size_t(a.slot)]);
      for (int s : step.out_slots) outs.push_back(slots_[size_t(s)]);
      if (device_) {
        device_->run_fused(*n.body(), ins, outs);
      } else {
        run_fused(*n.body(), ins, outs);
      }
      return;
    }
    case ir::NodeKind::functional:
    case ir::NodeKind::op: {
      std::vector<Value> bound;
      bound.reserve(step.args.size());
      for (const ArgRef& a : step.args) bound.push_back(arg_value(a));
      for (auto [arg, slot] : step.new_values) {  // functional<op>: write copies of the args
        copy(slots_[size_t(slot)], bound[arg].to_tensor());
        bound[arg] = slots_[size_t(slot)];
      }
      std::vector<Value> outs;
      if (!step.out_variant) {
        size_t returns = step.op->schema().returns.size();
        outs.resize(returns);
        for (size_t r = 0; r < returns && r < step.alias_return.size(); ++r) {
          if (!step.alias_return[r] && slots_[size_t(step.out_slots[r])].defined())
            outs[r] = slots_[size_t(step.out_slots[r])];
        }
        for (size_t r = step.alias_return.size(); r < returns; ++r)  // functional: the op's returns
          outs[r] = slots_[size_t(step.out_slots[r])];
      }
      call_bound_into(*step.op, bound, outs);
      if (!step.out_variant) {
        for (size_t r = 0; r < outs.size(); ++r)
          slots_[size_t(step.out_slots[r])] = outs[r].to_tensor();
      }
      return;
    }
  }
}

std::vector<Tensor> Executable::run(const std::vector<Tensor>& inputs, const RunOptions& options) {
  const ir::Graph& g = *plan_->graph;
  detail::check_inputs(g, inputs, "run");
  stats_ = {};
  if (device_) return run_on_device(inputs, options);
  ThreadDeviceGuard on_host(Device::cpu());  // a barrier step is a host barrier here
  for (Group* group : entry_barriers_)
    group->barrier(0, "Executable::run");  // Note [barrier before each run]
  for (size_t i = 0; i < inputs.size(); ++i) {
    slots_[size_t(input_slot_[i])] = inputs[i];
    if (staging_step_[i] >= 0) {
      const Tensor& staging = slots_[size_t(steps_[size_t(staging_step_[i])]->out_slots[0])];
      skip_copy_[size_t(staging_step_[i])] = detail::same_memory(inputs[i], staging);
      if (skip_copy_[size_t(staging_step_[i])]) continue;
    }
    // An input in this plan's pools (e.g. an output view of the previous run fed back) would be
    // overwritten by the steps while still needed: read it from a snapshot instead.
    if (std::find(pool_storages_.begin(), pool_storages_.end(), inputs[i].storage().get()) !=
        pool_storages_.end()) {
      if (!snapshots_[i].defined())
        snapshots_[i] = Tensor::empty(inputs[i].shape(), inputs[i].dtype());
      copy(snapshots_[i], inputs[i]);
      slots_[size_t(input_slot_[i])] = snapshots_[i];
    }
  }
  for (size_t s = 0; s < steps_.size(); ++s) {
    if (skip_copy_[s]) {
      ++stats_.input_copies_skipped;
      skip_copy_[s] = false;
      continue;
    }
    if (!options.on_step) {
      run_step(*steps_[s]);
      continue;
    }
    auto begin = std::chrono::steady_clock::now();
    run_step(*steps_[s]);
    options.on_step(s, begin, std::chrono::steady_clock::now());
  }
  for (auto [input, slot] : writebacks_) {
    if (!detail::same_memory(inputs[size_t(input)], slots_[size_t(slot)]))
      copy(inputs[size_t(input)], slots_[size_t(slot)]);
  }
  std::vector<Tensor> results = collect_outputs(options);
  for (int slot : transient_slots_) slots_[size_t(slot)] = Tensor();  // keep no caller memory alive
  return results;
}

std::vector<Tensor> Executable::collect_outputs(const RunOptions& options) {
  std::vector<Tensor> results;
  results.reserve(output_slot_.size());
  for (int slot : output_slot_) {
    const Tensor& t = slots_[size_t(slot)];
    if (options.output_mode == OutputMode::view) {
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
