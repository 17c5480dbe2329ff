// Executable: outputs written where the caller wants them (run with RunOptions::into).
//
// Note [outputs bound in place]: a run given destinations (`into`, as symmflow.torch passes the
// tensors PyTorch allocated for a partition's outputs) used to compute every output into the
// plan's pool and copy it there afterwards: the 40 saved activations of a Llama training step's
// forward and the gradients of its backward cost 74 copies, 0.75 ms of GPU time a step at
// 4 x 512 tokens on an H200. Now the output's slot is the destination itself for the run, and the
// step that produces it writes there. An output is bound so only when nothing else can see the
// difference:
//  - it has a planned buffer of its own in the regular pool (not a view, not an in-place result,
//    not symmetric memory: a collective's buffer lives in its group's heap), and no other planned
//    buffer is a view or an in-place result of it (those would keep the pool's address);
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
#include <algorithm>

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

// Which outputs may be bound to a destination (Note [outputs bound in place]).
void Executable::find_bindable_outputs() {
  const passes::Plan& p = *plan_;
  output_bindable_.assign(p.outputs.size(), false);
  std::vector<bool> aliased(p.buffers.size(), false);
  for (const passes::BufferPlan& b : p.buffers) {
    if (b.alias_of >= 0) aliased[size_t(b.alias_of)] = true;
  }
  for (size_t o = 0; o < p.outputs.size(); ++o) {
    const int v = p.outputs[o];
    const passes::PlanValue& value = p.values[size_t(v)];
    if (value.graph_input >= 0 || value.buffer < 0) continue;
    const passes::BufferPlan& b = p.buffers[size_t(value.buffer)];
    if (b.pool < 0 || b.alias_of >= 0 || aliased[size_t(value.buffer)]) continue;
    if (p.pools[size_t(b.pool)].layout.pool == ir::Pool::symm) continue;
    if (std::count(p.outputs.begin(), p.outputs.end(), v) != 1) continue;
    const bool written_back = std::any_of(p.writebacks.begin(), p.writebacks.end(),
                                          [&](const passes::Writeback& w) { return w.value == v; });
    output_bindable_[o] = !written_back;
  }
}

// Binds the destinations of this run's bindable outputs into their slots (restored with the
// staging slots after the run); on a GPU their addresses join `key`.
void Executable::bind_outputs(const std::vector<Tensor>& inputs, const RunOptions& options,
                              std::vector<const void*>* key) {
  if (options.into.empty() || !bind_outputs_ || !tunables().bind_outputs) return;
  const size_t first_bound = rebound_slots_.size();
  for (size_t o = 0; o < plan_->outputs.size() && o < options.into.size(); ++o) {
    if (!output_bindable_[o]) continue;
    const int v = plan_->outputs[o];
    const Tensor& dst = options.into[o];
    const Tensor& planned = slots_[size_t(v)];
    if (!dst.defined() || !dst.is_contiguous() || dst.shape() != planned.shape() ||
        dst.dtype() != planned.dtype() || dst.device() != planned.device() || dst.numel() == 0)
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
    slots_[size_t(v)] = dst;
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
