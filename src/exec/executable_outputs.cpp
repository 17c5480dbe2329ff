// Executable: outputs written where the caller wants them (run with RunOptions::into).
//
// Note [outputs bound in place]: a run given destinations (`into`, as symmflow.torch passes the
// tensors PyTorch allocated for a partition's outputs) used to compute every output into the
// plan's pool and copy it there afterwards: the 40 saved activations of a Llama training step's
// forward and the gradients of its backward cost 74 copies, 0.75 ms of GPU time a step at
// 4 x 512 tokens on an H200. Now the output's slot is the destination itself for the run, and the
// step that produces it writes there. An output is bound so only when nothing else can see the
// difference:
//  - it has a planned buffer of its own in the regular pool (not symmetric memory: a collective's
//    buffer lives in its group's heap), and no other planned buffer is a view or an in-place
//    result of it; or it is a contiguous view of the whole of such a buffer (Note [outputs that
//    are views]), and no other output is a view of it or it itself;
//  - it is not a graph input or a value written back into one, and appears once among the outputs;
//  - the destination is contiguous with its shape, dtype and device, lies outside the plan's
//    pools, and overlaps no input and no other bound destination.
// The others are copied as before (RunStats::output_copies). On a GPU a captured graph holds
// addresses, so bound destinations join the binding's key (Note [device inputs] in
// executable_device.cpp): PyTorch's caching allocator hands a training loop the same blocks every
// step, and the graphs of the last few keys replay. A caller whose destinations move every run
// would capture every run instead: after kOutputKeyMisses runs whose key no kept graph had, of
// the last kOutputKeyWindow, the executable stops binding outputs (copies, keys of inputs only).
// The tunable bind_outputs (SYMMFLOW_BIND_OUTPUTS=0) turns it off.
//
// Note [outputs that are views]: AOT autograd returns most of a backward's weight gradients as
// permute(permute(mm, [1, 0]), [1, 0]) and the norms' as reshape(sum): views, which the rule
// above left to be copied (20 of a Llama training step's 21 backward outputs, 0.6 ms of GPU time
// a step at 4 x 512 tokens on an H200, docs/benchmarks.md). When the view covers its base's whole
// buffer contiguously (ir::maybe_strided is false and the bytes are equal), the base's slot takes
// the destination instead, reinterpreted to the base's shape: the step that produces the base
// writes there and the views, made from the base's slot at run time, land on the destination
// itself, so nothing is copied. On a GPU the view steps are redone after a replay (Note [views
// after a replay] in executable_device.cpp): without that, a replay for one destination returned
// the view of the destination of the run before it.
#include <algorithm>
#include <map>

#include "exec/util.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::exec {

namespace {

// By address, not by storage: tensors over caller memory (DLPack, run_pointers) each wrap their
// own storage object, however they overlap.
bool overlaps(const char* lo_a, size_t bytes_a, const char* lo_b, size_t bytes_b) {
  return lo_a < lo_b + bytes_b && lo_b < lo_a + bytes_a;
}

bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.device() != b.device()) return false;
  return overlaps(static_cast<const char*>(a.raw_data()), a.nbytes(),
                  static_cast<const char*>(b.raw_data()), b.nbytes());
}

}  // namespace

// Which outputs may be bound to a destination, and through which slot (Note [outputs bound in
// place], Note [outputs that are views]).
void Executable::find_bindable_outputs() {
  const passes::Plan& p = *plan_;
  output_bind_slot_.assign(p.outputs.size(), -1);
  std::vector<bool> aliased(p.buffers.size(), false);
  for (const passes::BufferPlan& b : p.buffers) {
    if (b.alias_of >= 0) aliased[size_t(b.alias_of)] = true;
  }
  std::map<int, int> owner;  // buffer with memory of its own -> the value it was planned for
  for (size_t v = 0; v < p.values.size(); ++v) {
    const int b = p.values[v].buffer;
    if (b >= 0 && p.buffers[size_t(b)].pool >= 0 && p.values[v].graph_input < 0)
      owner.emplace(b, int(v));
  }
  auto root = [&](int b) {
    while (p.buffers[size_t(b)].alias_of >= 0) b = p.buffers[size_t(b)].alias_of;
    return b;
  };
  std::map<int, int> roots_taken;  // root buffer -> how many outputs reach it
  for (int v : p.outputs) {
    const int b = p.values[size_t(v)].buffer;
    if (b >= 0) ++roots_taken[root(b)];
  }
  for (size_t o = 0; o < p.outputs.size(); ++o) {
    const int v = p.outputs[o];
    const passes::PlanValue& value = p.values[size_t(v)];
    if (value.graph_input >= 0 || value.buffer < 0) continue;
    if (std::count(p.outputs.begin(), p.outputs.end(), v) != 1) continue;
    const bool written_back = std::any_of(p.writebacks.begin(), p.writebacks.end(),
                                          [&](const passes::Writeback& w) { return w.value == v; });
    if (written_back) continue;
    const passes::BufferPlan& b = p.buffers[size_t(value.buffer)];
    int slot = -1;
    if (b.alias_of < 0) {
      if (b.pool >= 0 && !aliased[size_t(value.buffer)]) slot = v;
    } else {  // Note [outputs that are views]
      const int r = root(value.buffer);
      const passes::BufferPlan& base = p.buffers[size_t(r)];
      const ir::Value* iv = p.graph->find_value(value.name);
      auto it = owner.find(r);
      if (base.pool >= 0 && it != owner.end() && roots_taken[r] == 1 && iv &&
          !ir::maybe_strided(iv) && value.type.bytes() == base.type.bytes())
        slot = it->second;
    }
    if (slot < 0 || p.pools[size_t(p.buffers[size_t(p.values[size_t(slot)].buffer)].pool)]
                            .layout.pool == ir::Pool::symm)
      continue;
    output_bind_slot_[o] = slot;
  }
}

// Binds the destinations of this run's bindable outputs into their slots (restored with the
// staging slots after the run); on a GPU their addresses join `key`.
void Executable::bind_outputs(const std::vector<Tensor>& inputs, const RunOptions& options,
                              std::vector<const void*>* key) {
  if (options.into.empty() || !bind_outputs_ || !tunables().bind_outputs) return;
  const size_t first_bound = rebound_slots_.size();
  for (size_t o = 0; o < plan_->outputs.size() && o < options.into.size(); ++o) {
    const int v = output_bind_slot_[o];
    if (v < 0) continue;
    const passes::PlanValue& out = plan_->values[size_t(plan_->outputs[o])];
    const Tensor& dst = options.into[o];
    const Tensor& planned = slots_[size_t(v)];
    if (!dst.defined() || !dst.is_contiguous() || dst.shape() != out.type.shape ||
        dst.dtype() != planned.dtype() || dst.device() != planned.device() || dst.numel() == 0 ||
        dst.nbytes() != planned.nbytes())
      continue;
    const bool in_pools = std::any_of(
        pool_storages_.begin(), pool_storages_.end(), [&](const Storage* pool) {
          return pool->device() == dst.device() &&
                 overlaps(static_cast<const char*>(pool->data()), pool->bytes(),
                          static_cast<const char*>(dst.raw_data()), dst.nbytes());
        });
    if (in_pools) continue;
    bool clash = std::any_of(inputs.begin(), inputs.end(),
                             [&](const Tensor& in) { return overlaps(in, dst); });
    for (size_t k = first_bound; k < rebound_slots_.size() && !clash; ++k)
      clash = overlaps(slots_[size_t(rebound_slots_[k])], dst);
    if (clash) continue;
    slots_[size_t(v)] = v == plan_->outputs[o]
                            ? dst
                            : Tensor::from_storage(dst.storage(), dst.offset_bytes(),
                                                   planned.dtype(), planned.shape());
    rebound_slots_.push_back(v);
    ++stats_.outputs_bound;
    if (key) key->push_back(dst.raw_data());
  }
}

// Note [outputs bound in place]: the safety valve for destinations that move every run.
void Executable::note_output_key(const std::vector<const void*>& key) {
  if (!bind_outputs_ || stats_.outputs_bound == 0) return;
  const bool seen = std::find(recent_keys_.begin(), recent_keys_.end(), key) != recent_keys_.end();
  if (!seen) {
    recent_keys_.push_front(key);
    if (recent_keys_.size() > kOutputKeysKept) recent_keys_.pop_back();
  }
  key_misses_.push_back(!seen);
  if (key_misses_.size() > kOutputKeyWindow) key_misses_.erase(key_misses_.begin());
  if (size_t(std::count(key_misses_.begin(), key_misses_.end(), true)) >= kOutputKeyMisses) {
    bind_outputs_ = false;  // from the next run on
    recent_keys_.clear();
  }
}

}  // namespace symmflow::exec
