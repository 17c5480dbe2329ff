// Executable: a Plan bound to the calling rank. Pools are allocated once (one host allocation for
// the regular pool, one collective SymmetricHeap per symm pool, in plan order), every planned
// buffer gets a tensor view, and run() executes the steps in order, reusing them every run: no
// allocation and no rendezvous after construction, but for the rank agreement of the first run
// and of a run whose inputs' layout changed (Note [rank agreement] in exec/agreement.cpp).
//
//   auto plan = passes::compile(std::move(graph));
//   exec::Executable exe(plan);                        // collective: every rank constructs it
//   Tensor x = exe.input_handle(0);                    // write the input here: zero copies
//   std::vector<Tensor> out = exe.run({x, w0, w1});
//   exe.last_stats().copies;                           // 0
//
// On a GPU (ExecOptions{.device = Device::cuda(i)}, after cuda::bind_device()) the pools are
// device memory and GPU symmetric heaps; each step runs on a compute or a communication stream
// with events where the plan's data flow crosses them; the first run captures the steps into one
// CUDA graph and later runs replay it. Inputs (host or device tensors) are copied into fixed
// device buffers before the graph (cudaMemcpyAsync), except an input that already is that buffer
// (input_handle), and an input already on the plan's GPU, contiguous and outside the plan's
// pools, which the steps read in place (a graph is captured per binding: Note [device inputs]):
// zero copies. RunOptions::stream orders a run on the caller's stream, inside its CUDA graph
// capture too.
//
// The Executable reads only the typed plan (Note [typed plan] in passes/plan.hpp): step kinds,
// resolved op handles, operand and result value ids, copy kinds, groups. It never reads an IR
// attribute nor looks an op up by name; IR nodes serve its error messages only.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "symmflow/core/tensor.hpp"
#include "symmflow/exec/device_backend.hpp"
#include "symmflow/passes/plan.hpp"
#include "symmflow/runtime/heap.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow::exec {

namespace detail {
class RankAgreement;  // exec/agreement.hpp
}

enum class OutputMode {
  owned,  // outputs are fresh tensors the caller owns
  view,   // outputs are views into the plan's pools (or the caller's inputs), valid until the
          // next run() of this Executable
};

struct ExecOptions {
  Device device = Device::cpu();  // cuda:i: run on that GPU (the rank thread's bound GPU)
  bool cuda_graph = true;         // capture the steps on the first run and replay them later
};

struct RunOptions {
  OutputMode output_mode = OutputMode::owned;
  // Called after each executed step (skipped copy-ins excluded) with its index into plan().steps
  // and when it began and ended, e.g. for traces. Empty: no clock is read.
  std::function<void(size_t step, std::chrono::steady_clock::time_point begin,
                     std::chrono::steady_clock::time_point end)>
      on_step;
  // On a GPU: wait for the run (raising what failed) before returning. false returns as soon as
  // the run is enqueued; call Executable::synchronize() before reading its outputs.
  bool synchronize = true;
  // On a GPU: the caller's stream (a cudaStream_t, e.g. PyTorch's current stream; a null pointer
  // is the legacy default stream), or none. The run is ordered after the work queued there and
  // that stream waits for it; nothing waits on the host (synchronize is ignored), and while the
  // stream is being captured into a CUDA graph the run is captured into it (Note [caller's
  // stream] in executable_device.cpp).
  std::optional<void*> stream = std::nullopt;
  // Caller-owned destinations: output i is copied into into[i] as part of the run (on a GPU, on
  // its stream), and run() returns them. Empty: output_mode decides.
  std::vector<Tensor> into = {};
};

// What one run did. Copies are the data copies the plan needed: copy-ins of graph inputs (0 when
// the caller bound the staging buffer from input_handle), identity copies, the written arguments
// of functional<op> nodes, and writebacks into the caller's inputs. Copies that make owned outputs
// are counted apart.
struct RunStats {
  size_t copies = 0;
  size_t bytes_copied = 0;
  // Copy-ins skipped: the input already was the staging buffer, or symmetric memory of its group
  // bound in its place (Note [symmetric inputs bound in place] in executable.cpp).
  size_t input_copies_skipped = 0;
  size_t output_copies = 0;  // copies into owned outputs or destinations (`into`)
  size_t output_bytes = 0;
  // Outputs written straight into their destination (Note [outputs bound in place] in
  // exec/executable_outputs.cpp).
  size_t outputs_bound = 0;
  // Op calls made from their step's launch record (Note [launch records] in executable.cpp):
  // every call step with a tensor operand (not only a tensor list).
  size_t prepared_calls = 0;
  // Of those, calls whose kernel found what it resolved on an earlier call in the record (a
  // collective's group and reduce op: Note [prepared collectives] in
  // kernels/cpu/collectives/args.hpp).
  size_t prepared_states = 0;
  // Fused steps run on the host from the program an earlier run prepared (Note [fused programs
  // prepared once] in exec/fused.hpp).
  size_t prepared_fused = 0;
};

class Executable {
 public:
  // On the calling rank (Runtime::current()); collective over the groups of the plan's symm pools.
  // Creates the graph's groups when the runtime lacks them (ensure_groups). When the plan
  // communicates, collective over the world first: the ranks agree that they compiled the same
  // plan (Note [rank agreement] in exec/agreement.cpp; InvalidUsage naming what differs).
  explicit Executable(std::shared_ptr<const passes::Plan> plan, ExecOptions options = {});
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  // Runs the plan on `inputs` (one per graph input, shape and dtype checked; errors name the
  // input). Collective when the plan communicates: every rank runs with the same plan, and the
  // first run, and any run whose inputs differ in dtype, shape or strides from the last agreed
  // one, first agrees with every rank of the world on them (Note [rank agreement]: InvalidUsage
  // on every rank naming the input, each rank's binding and the input's source line). An input
  // that lives in this plan's pools (an output view of an earlier run fed back) is first copied to
  // a snapshot owned by the Executable (made once, counted in RunStats::copies); the staging
  // buffer from input_handle is bound without a copy, and so is, on the host, an input already
  // in symmetric memory of the staging buffer's group when every rank binds it so (Note
  // [symmetric inputs bound in place] in executable.cpp).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const RunOptions& options = {});

  // What run() does first: agree with every rank on `inputs` (dtype, shape, strides), exchanging
  // only when they differ from the last agreed binding; a no-op when agreement is off. For callers
  // that check inputs themselves before run() (the api's Session), so that ranks that disagree
  // all raise the same error instead of one rank raising alone while its peers wait.
  void agree_on_inputs(const std::vector<Tensor>& inputs);

  // A tensor to hold input i. For an input copied into a staging buffer (a symm arg), the staging
  // buffer itself: a caller that writes its input there and passes this tensor to run() costs no
  // copy. Otherwise a tensor of the input's type owned by the Executable (made once).
  Tensor input_handle(size_t i);
  // input_handle(i) when it exists already (undefined otherwise): makes nothing.
  Tensor existing_input_handle(size_t i) const;

  // Waits for the device work of earlier runs and raises what failed (no-op on the cpu).
  void synchronize();
  // "cpu", or the device backend's description (device, streams, graph).
  std::string device_description() const;

  const RunStats& last_stats() const { return stats_; }
  const passes::Plan& plan() const { return *plan_; }
  // The view of the planned buffer of value `name` (for tests and debugging); throws InvalidUsage
  // when the value has no planned memory.
  Tensor buffer(const std::string& name) const;
  // Allocations made (host pool + heaps; on a device also input buffers made on first use).
  size_t allocations() const { return allocations_; }
  // Rank-agreement all-gathers made so far, construction included (0 when off: a world of one
  // rank, a plan that does not communicate, or SYMMFLOW_RANK_AGREEMENT=0).
  size_t agreement_exchanges() const;

  struct Step;  // a precompiled step (executable.cpp)

 private:
  // Construction, in order (executable.cpp).
  void bind_runtime();
  void agree_on_plan();
  void make_groups();
  void allocate_pools();
  void bind_slots();
  void bind_steps();
  void find_staging_inputs();
  void bind_entry_barriers();

  void run_step(Step& step);
  void run_call(Step& step);
  void prepare_call(Step& step);
  void bind_inputs(const std::vector<Tensor>& inputs);
  // Where input i is bound in place of its staging buffer ("" when it is not).
  std::string in_place_placement(size_t i, const Tensor& input) const;
  void restore_rebound_slots();
  void write_back(const std::vector<Tensor>& inputs);
  void copy(const Tensor& dst, const Tensor& src);
  void prepare_device();
  void find_replay_views();  // Note [views after a replay] (executable_device.cpp)
  std::vector<Tensor> run_on_device(const std::vector<Tensor>& inputs, const RunOptions& options);
  RunBinding bind_device_inputs(const std::vector<Tensor>& inputs, std::vector<bool>& copy_in,
                                std::optional<void*> stream);
  Tensor& device_handle(size_t i);
  std::vector<Tensor> collect_outputs(const RunOptions& options);
  // Note [outputs bound in place] (executable_outputs.cpp).
  void find_bindable_outputs();
  void bind_outputs(const std::vector<Tensor>& inputs, const RunOptions& options,
                    std::vector<const void*>* key);
  void note_output_key(const std::vector<const void*>& key);

  std::shared_ptr<const passes::Plan> plan_;
  ExecOptions options_;
  std::unique_ptr<DeviceBackend> device_;  // null on the cpu
  RunStats graph_stats_;                   // copies inside the captured steps (replays repeat them)
  bool captured_ = false;
  Runtime* runtime_ = nullptr;
  std::shared_ptr<Storage> regular_;
  std::vector<std::shared_ptr<SymmetricHeap>> heaps_;  // per pool; null for the regular pool
  std::vector<std::shared_ptr<Storage>> pool_storage_;  // per pool: the regular one or a heap
  std::vector<Tensor> buffer_views_;                   // per planned buffer (undefined for views)
  std::vector<Tensor> slots_;                          // per plan value: its tensor this run
  std::vector<int> transient_slots_;                   // inputs and views: cleared after a run
  std::vector<int> staging_step_;                      // per graph input: its copy-in step, or -1
  std::vector<bool> bind_in_place_;                    // per graph input: may replace its staging
  std::vector<int> rebound_slots_;  // staging slots bound to inputs, outputs bound, this run
  // Per output: the plan value whose slot takes the destination (the output itself, or the base
  // of a contiguous view of a whole buffer), or -1 (Note [outputs bound in place]).
  std::vector<int> output_bind_slot_;
  bool bind_outputs_ = true;           // false once destinations moved too often (GPU)
  static constexpr size_t kOutputKeysKept = 4, kOutputKeyWindow = 16, kOutputKeyMisses = 8;
  std::deque<std::vector<const void*>> recent_keys_;
  std::vector<bool> key_misses_;
  std::vector<Tensor> handles_;                        // input_handle cache
  // Device plans (Note [device inputs]): the steps' streams with synthetic input ranges, and
  // each input's synthetic range (null for a staged input).
  std::vector<StepStream> device_streams_;
  std::vector<ByteRange> input_ranges_;
  // The last binding's key and its rebased stable ranges (rebuilt when the key changes).
  std::vector<const void*> bound_key_;
  std::vector<std::vector<ByteRange>> bound_stable_;
  std::vector<Tensor> snapshots_;                      // per input: copy of an input in our pools
  std::vector<const Storage*> pool_storages_;          // the storages of the pools
  std::vector<std::unique_ptr<Step>> steps_;
  std::vector<bool> skip_copy_;         // per step, this run
  std::vector<bool> skip_always_;       // per step: a copy-in done before the steps (device)
  std::vector<size_t> replay_views_;    // view steps an output reads, redone on a replay (device)
  // Note [barrier before each run] (executable.cpp): each group with its barrier op.
  std::vector<std::pair<Group*, const OpDef*>> entry_barriers_;
  RunStats stats_;
  size_t allocations_ = 0;
  bool communicates_ = false;
  uint64_t program_ = 0;  // Note [program steps in agreement]; 0 when it does not communicate
  std::unique_ptr<detail::RankAgreement> agreement_;  // null when off
};

}  // namespace symmflow::exec
