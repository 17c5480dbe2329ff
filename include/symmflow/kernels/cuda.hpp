// The cuda kernels layer's public API (symmflow_cuda): the collectives of a group on GPU symmetric
// memory (cuda::Communicator, with its algorithm choice and launch shapes: kernels/algorithm.hpp
// holds the one rule), each rank thread's communicator per group, host <-> device copies, and
// how the kernels of the step being enqueued may launch (set by exec).
//
//   symmflow::run_threads(2, [](symmflow::Runtime& rt) {
//     symmflow::cuda::bind_device();
//     auto comm = symmflow::cuda::Communicator::create(rt.group("world"), 1 << 20);
//     comm->all_reduce(in, out, n, DType::bf16, "sum", stream);   // device pointers, any stream
//     comm->synchronize(stream);                                   // raises on timeout
//   });
//
// Collectives never allocate and keep their call count on the device, so a CUDA graph that
// captured them replays correctly. Waits on the GPU are bounded: a kernel whose peer does not
// arrive within tunables().timeout_s gives up, and the next synchronize() (or check()) raises
// Timeout on the host naming the op, group, rank and peer. After that the communicator refuses
// further calls.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "symmflow/core/dtype.hpp"
#include "symmflow/core/tensor.hpp"
#include "symmflow/runtime/cuda.hpp"
#include "symmflow/runtime/cuda_signals.hpp"
#include "symmflow/runtime/group.hpp"

namespace symmflow::cuda {

// Algorithms of all_reduce (Note [cuda all-reduce] in src/kernels/cuda/collectives/all_reduce.cu).
//   one_shot: every rank pushes its input into every peer's staging buffer, signals, and reduces
//             all copies locally: one synchronization, W-1 copies of the data over the links.
//   two_shot: reduce-scatter then all-gather, pushing both ways; in place on a DeviceHeap buffer.
enum class Algo { automatic, one_shot, two_shot };
const char* algo_name(Algo a);
Algo parse_algo(std::string_view name);  // "auto", "one_shot", "two_shot"

class Communicator {
 public:
  // Collective over `group`: allocates the staging buffers (2 x world x max_bytes per rank) and
  // signal pads. `max_bytes` bounds the size of one call.
  static std::unique_ptr<Communicator> create(std::shared_ptr<Group> group, size_t max_bytes);
  ~Communicator();

  // The algorithm all_reduce_inplace takes for a call of `bytes` (the same on every rank:
  // kernels::cuda_all_reduce_algorithm of kernels/algorithm.hpp): one_shot up to
  // kernels::cuda_one_shot_limit(world), two_shot above.
  Algo choose(int64_t bytes) const;

  // out = reduce over ranks of in (n elements of `dtype`; f32, bf16, f16), one_shot algorithm (or
  // whatever `algo` says; two_shot needs a symmetric buffer: use all_reduce_inplace). `in` and
  // `out` are device pointers of this rank's GPU and may be equal. Enqueued on `stream`
  // (cudaStream_t, nullptr for the legacy stream); capture-safe.
  void all_reduce(const void* in, void* out, int64_t n, DType dtype, std::string_view reduce_op,
                  void* stream, Algo algo = Algo::one_shot);
  // In place on n elements at `offset_bytes` of `heap` (a DeviceHeap of this group); algorithm
  // from choose() unless given.
  void all_reduce_inplace(const DeviceHeap& heap, size_t offset_bytes, int64_t n, DType dtype,
                          std::string_view reduce_op, void* stream, Algo algo = Algo::automatic);

  // The other collectives of the group (Note [cuda exchange] in src/kernels/cuda/collectives/exchange.cu):
  // device pointers of this rank's GPU or of peers' (peer access), enqueued on `stream`,
  // capture-safe. `op` names the calling op in the error that synchronize() raises when a peer
  // never arrives. Every member calls them in the same order with the same sizes.
  struct Copy {
    const void* src = nullptr;
    void* dst = nullptr;
    size_t bytes = 0;
  };
  void barrier(std::string_view op, void* stream);
  // A barrier, the copies (at most 8), a barrier. `agreed_bytes` is the same on every member
  // (it sizes the launch; a member may have fewer copies, such as broadcast's root).
  void copy(std::span<const Copy> copies, size_t agreed_bytes, std::string_view op, void* stream);
  // A barrier; out[o * chunk + i] = reduce over members p, in rank order, of
  // srcs[p][o * row_stride + i] (elements of dtype: f32, bf16, f16); a barrier.
  void reduce_scatter(std::span<const void* const> srcs, void* out, int64_t outer, int64_t chunk,
                      int64_t row_stride, DType dtype, std::string_view reduce_op,
                      std::string_view op, void* stream);
  // all_to_all_vdev: splits[p], inputs[p]: member p's in_splits (i64[world]) and input; `meta`
  // this member's out_splits_offsets (i64[2, world]). Invalid splits copy nothing and make
  // synchronize() raise.
  void all_to_all(std::span<const int64_t* const> splits, std::span<const void* const> inputs,
                  void* out, int64_t* meta, int64_t row_bytes, int64_t in_rows, int64_t out_rows,
                  void* stream);
  // Copies `bytes` from src into `peer_dst` (the peer's memory), then raises the peer's signal on
  // `channel`; wait_signal consumes the signal from `peer` (Note [signal protocol] in group.hpp).
  // Not collective: only the two members take part.
  void put_signal(const void* src, void* peer_dst, size_t bytes, int peer, int channel,
                  void* stream);
  void wait_signal(int peer, int channel, void* stream);
  int channels() const;
  // The signal pads for kernels of your own (cuda_signals.hpp, cuda_device.cuh).
  SignalPads signal_pads() const;

  // Waits for `stream` and raises if a collective of this communicator failed on the GPU.
  void synchronize(void* stream);
  // Raises if a collective failed (reads the host-mapped report; the caller synchronized). Every
  // call of the communicator also raises a failure an earlier call's kernel recorded: a timeout,
  // bad splits, or ranks that called different collectives (Note [gpu collective agreement] in
  // src/kernels/cuda/collectives/call_signature.hpp).
  void check();
  // Raises when this communicator failed, or its group is poisoned (a member's failure or the
  // world's: Note [poisoned groups] in group.hpp): what every call checks first, and what a plan
  // checks before it replays the group's captured collectives.
  void check_usable(std::string_view op);
  const std::shared_ptr<Group>& group() const { return group_; }

  struct State;  // device workspace and launch configuration (src/kernels/cuda/collectives/communicator.cpp)

 private:
  // Collectives of a file of their own launch on the workspace through it (Note [one file per
  // collective] in src/kernels/cuda/collective.hpp).
  friend struct WorkspaceAccess;
  Communicator() = default;
  void check_signal(std::string_view op, int peer, int channel) const;
  std::shared_ptr<Group> group_;
  std::unique_ptr<State> state_;
};

// How the kernels of the step being enqueued may launch (Note [early launch] in
// src/exec/streams.cpp). The executor sets it around each step; elsewhere nothing starts early. A
// kernel that supports it is a programmatic dependent launch when `early`; when also
// `after_communication`, it may read memory inside one of the `stable` ranges before its wait for
// the kernel ahead.
struct StepLaunch {
  // A step of a plan (not an eager call): its pointwise programs are compiled kernels (Note
  // [plan steps compiled] in src/kernels/cuda/pointwise/program.cpp).
  bool in_plan = false;
  bool early = false;
  bool after_communication = false;
  std::vector<std::pair<const char*, const char*>> stable;  // [lo, hi) byte ranges
  bool is_stable(const void* p, size_t bytes) const;
};
const StepLaunch& current_launch();
void set_current_launch(const StepLaunch* launch);  // nullptr: not early, nothing stable

// Host copy of a tensor (any device); waits for the current stream.
Tensor to_host(const Tensor& t);
// Copy of a host tensor on the GPU bound to this thread.
Tensor to_device(const Tensor& t);

// The calling rank thread's communicator of `group`, able to take a call of `bytes`: made on first
// use and remade larger when a call needs more (collective either way: every rank makes the same
// calls in the same order). Raises InvalidUsage when that would happen during capture.
Communicator& communicator(const std::shared_ptr<Group>& group, size_t bytes);

// A group whose members run on more than one host has no peers' memory to work on: its
// collectives go through NCCL (Note [nccl engine] in src/kernels/cuda/collectives/nccl.cpp). This
// makes the calling rank thread's NCCL communicator of `group` now if need be (collective: every
// member calls it in the same order), so that a plan's CUDA graph capture finds it ready; with
// its calls of at most `bytes`, what a hierarchical all-reduce needs too (Note [hierarchical GPU
// all-reduce] in src/kernels/cuda/collectives/spanning.cpp).
void prepare_spanning(const std::shared_ptr<Group>& group, size_t bytes);
// Waits for `stream`, which may hold this rank thread's NCCL calls, at most the world's timeout:
// raises PeerFailure, Nccl or Timeout naming the group when a peer failed, NCCL reported an
// error or the time ran out, and aborts the thread's NCCL communicators then (Note [bounded
// NCCL waits] in src/kernels/cuda/collectives/nccl.cpp).
void synchronize_spanning(void* stream, std::string_view op);
// Raises when the NCCL communicator of `group` was aborted (a plan asks before each run).
void check_spanning(const std::shared_ptr<Group>& group, std::string_view op);

// ---- Note [measured kernel choice] (src/kernels/cuda/choice/kernel_choice.hpp) ----------------------
// Where several kernels can run one GPU call (cuDNN's fused attention or symmflow's own), the
// first call of each shape times them and keeps the fastest; these report and steer the choices.
struct RefusedKernel {
  std::string name, why;  // a kernel that could not run the call, and why
};
struct KernelChoice {
  std::string op, key;  // key: dtype, dims and flags of the call, and library versions
  std::string chosen;   // "cudnn", "own"
  std::string how;      // "measured" (or "measured during capture"), "cached on disk",
                        // "only candidate", "search off", "forced"
  std::vector<std::pair<std::string, double>> median_us;  // per timed candidate
  // Candidates timed once only, far slower than the best before them (Note [slow candidates stop
  // early] in kernels/cuda/choice/kernel_choice.cpp); their median_us is that one run.
  std::vector<std::string> stopped_early;
  std::vector<RefusedKernel> refused;
};
// Every choice made in this process (one per op and key), in the order made.
std::vector<KernelChoice> kernel_choices();
// One line per choice: "op key: chosen (how; name 12.3 us, ...; refused: name: why)".
std::string format_kernel_choices();
// Forgets the in-memory choices (tests and tools); the disk cache stays.
void reset_kernel_choices();
// Runs the candidate named `name` wherever it can run the call ("" : choose as usual); tests and
// benchmarks compare kernels with it.
void force_kernel(std::string name);
// The disk cache's path ("" when no folder can be named).
std::string kernel_choice_cache_path();

}  // namespace symmflow::cuda
