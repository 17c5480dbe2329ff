// cuda::Communicator: the workspace of the GPU collectives of one group and the host side of
// their calls (argument checks, algorithm choice, launch shape, failure reporting). The kernels
// and their protocol are in kernels/cuda/all_reduce.cu (Note [cuda all-reduce]).
#include <algorithm>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "kernels/cuda/collectives.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/runtime/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::cuda {

namespace {

ElemType elem_type(DType d) {
  switch (d) {
    case DType::f32:
      return ElemType::f32;
    case DType::bf16:
      return ElemType::bf16;
    case DType::f16:
      return ElemType::f16;
    default:
      break;
  }
  invalid_usage("cuda all_reduce: dtype {} is not supported on the GPU (f32, bf16, f16)",
                dtype_name(d));
}

ReduceKind reduce_kind(std::string_view name) {
  if (name == "sum") return ReduceKind::sum;
  if (name == "avg") return ReduceKind::avg;
  if (name == "max") return ReduceKind::max;
  if (name == "min") return ReduceKind::min;
  invalid_usage("cuda all_reduce: unknown reduce_op '{}' (valid: sum, avg, max, min)", name);
}

bool aligned(const void* p, uintptr_t to) {
  return reinterpret_cast<uintptr_t>(p) % to == 0;
}

// Blocks for `units` units of work per rank: enough threads for every unit up to `per_thread`
// units each, at most `limit` blocks (one or two per multiprocessor: every block of every rank is
// resident at once, so blocks waiting for their peers never starve the blocks they wait for).
int blocks_for(int64_t units, int threads, int per_thread, int limit) {
  int64_t want = (units + int64_t(threads) * per_thread - 1) / (int64_t(threads) * per_thread);
  return int(std::clamp<int64_t>(want, 1, std::min(limit, kMaxBlocks)));
}

}  // namespace

const char* algo_name(Algo a) {
  switch (a) {
    case Algo::automatic:
      return "auto";
    case Algo::one_shot:
      return "one_shot";
    case Algo::two_shot:
      return "two_shot";
  }
  return "?";
}

Algo parse_algo(std::string_view name) {
  if (name == "auto") return Algo::automatic;
  if (name == "one_shot") return Algo::one_shot;
  if (name == "two_shot") return Algo::two_shot;
  invalid_usage("cuda: unknown all-reduce algorithm '{}' (valid: auto, one_shot, two_shot)", name);
}

struct Communicator::State {
  std::shared_ptr<DeviceHeap> staging, flags, ll;
  void* words = nullptr;  // calls, done, status (this rank only)
  int device = 0;
  int sms = 1;      // multiprocessors this rank's collectives may occupy
  int sharing = 1;  // members of the group on this rank's GPU
  size_t max_bytes = 0;
  double timeout_s = 0;
  bool failed = false;
  std::string failure;
  WorkspaceView view{};
  ~State() {
    if (words) {
      cudaSetDevice(device);
      cudaFree(words);
    }
  }
};

std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Group> group, size_t max_bytes) {
  const int w = group->size();
  SF_CHECK(w <= kMaxRanks, "cuda::Communicator: group '{}' has {} ranks; at most {} are supported",
           group->name(), w, kMaxRanks);
  auto c = std::unique_ptr<Communicator>(new Communicator());
  auto s = std::make_unique<State>();
  SF_CUDA_CHECK(cudaGetDevice(&s->device));
  SF_CUDA_CHECK(cudaDeviceGetAttribute(&s->sms, cudaDevAttrMultiProcessorCount, s->device));
  s->max_bytes = (std::max<size_t>(max_bytes, 16) + 255) / 256 * 256;
  s->timeout_s = group->bootstrap().timeout_s();
  s->staging = DeviceHeap::allocate(group, 2 * size_t(w) * s->max_bytes, "cuda::Communicator");
  s->flags = DeviceHeap::allocate(group, size_t(kFlagWords) * 4, "cuda::Communicator");
  const size_t ll_bytes = 2 * size_t(std::min<int64_t>(kLLMaxBytes, int64_t(s->max_bytes)));
  s->ll = DeviceHeap::allocate(group, 2 * size_t(w) * ll_bytes, "cuda::Communicator");
  // Ranks that share a GPU split its multiprocessors (bind_device()).
  s->sharing = 0;
  for (int r = 0; r < w; ++r) s->sharing += s->staging->device_of(r) == s->device;
  s->sms = std::max(1, s->sms / s->sharing);
  SF_CUDA_CHECK(cudaMalloc(&s->words, 64));
  auto stream = static_cast<cudaStream_t>(current_stream());  // Note [ranks sharing a GPU]
  SF_CUDA_CHECK(cudaMemsetAsync(s->words, 0, 64, stream));
  SF_CUDA_CHECK(cudaStreamSynchronize(stream));
  WorkspaceView& v = s->view;
  for (int r = 0; r < w; ++r) {
    v.staging[r] = static_cast<char*>(s->staging->peer(r));
    v.flags[r] = static_cast<uint32_t*>(s->flags->peer(r));
    v.ll[r] = static_cast<char*>(s->ll->peer(r));
  }
  v.calls = static_cast<uint32_t*>(s->words);
  v.done = v.calls + 1;
  v.status = reinterpret_cast<int*>(v.calls + 2);
  v.stage_bytes = int64_t(s->max_bytes);
  v.ll_bytes = int64_t(ll_bytes);
  v.timeout_ns = uint64_t(s->timeout_s * 1e9);
  v.rank = group->rank();
  v.world = w;
  c->group_ = std::move(group);
  c->state_ = std::move(s);
  return c;
}

Communicator::~Communicator() = default;

Algo Communicator::choose(int64_t bytes) const {
  return bytes <= tunables().cuda_one_shot_max_bytes ? Algo::one_shot : Algo::two_shot;
}

void Communicator::all_reduce(const void* in, void* out, int64_t n, DType dtype,
                              std::string_view reduce_op, void* stream, Algo algo) {
  State& s = *state_;
  SF_CHECK(!s.failed,
           "cuda all_reduce: the communicator of group '{}' failed earlier ({}); "
           "create a new one",
           group_->name(), s.failure);
  SF_CHECK(algo != Algo::two_shot,
           "cuda all_reduce: two_shot reduces in place in GPU symmetric memory; allocate the "
           "buffer with cuda::DeviceHeap and call all_reduce_inplace");
  ElemType type = elem_type(dtype);
  ReduceKind op = reduce_kind(reduce_op);
  SF_CHECK(n >= 0, "cuda all_reduce: negative element count {}", n);
  const int64_t bytes = n * int64_t(dtype_size(dtype));
  SF_CHECK(size_t(bytes) <= s.max_bytes,
           "cuda all_reduce: {} bytes exceed the communicator's max_bytes {} (group '{}')", bytes,
           s.max_bytes, group_->name());
  if (n == 0) return;
  Launch l;
  if (bytes <= kLLMaxBytes && bytes % 8 == 0 && aligned(in, 8) && aligned(out, 8)) {
    l.threads = 512;
    l.blocks = blocks_for(bytes / 8, l.threads, 1, s.sms);
    SF_CUDA_CHECK(cudaError_t(launch_one_shot_ll(s.view, in, out, n, type, op, l, stream)));
    return;
  }
  l.vec = bytes % 16 == 0 && aligned(in, 16) && aligned(out, 16);
  const int64_t units = l.vec ? bytes / 16 : n;
  l.threads = int(tunables().cuda_threads) / 32 * 32;
  l.blocks = blocks_for(units, l.threads, 2, s.sms);
  int err = launch_one_shot(s.view, in, out, n, type, op, l, stream);
  SF_CUDA_CHECK(cudaError_t(err));
}

void Communicator::all_reduce_inplace(const DeviceHeap& heap, size_t offset_bytes, int64_t n,
                                      DType dtype, std::string_view reduce_op, void* stream,
                                      Algo algo) {
  State& s = *state_;
  SF_CHECK(heap.group()->name() == group_->name(),
           "cuda all_reduce: the buffer was allocated in group '{}' but the communicator is of "
           "group '{}'",
           heap.group()->name(), group_->name());
  const int64_t bytes = n * int64_t(dtype_size(dtype));
  SF_CHECK(n >= 0 && offset_bytes + size_t(bytes) <= heap.bytes(),
           "cuda all_reduce: {} elements at offset {} do not fit a heap of {} bytes", n,
           offset_bytes, heap.bytes());
  char* local = static_cast<char*>(heap.local()) + offset_bytes;
  if (algo == Algo::automatic) algo = choose(bytes);
  if (algo == Algo::one_shot) {
    all_reduce(local, local, n, dtype, reduce_op, stream, Algo::one_shot);
    return;
  }
  SF_CHECK(!s.failed,
           "cuda all_reduce: the communicator of group '{}' failed earlier ({}); "
           "create a new one",
           group_->name(), s.failure);
  ElemType type = elem_type(dtype);
  ReduceKind op = reduce_kind(reduce_op);
  SF_CHECK(size_t(bytes) <= s.max_bytes,
           "cuda all_reduce: {} bytes exceed the communicator's max_bytes {} (group '{}')", bytes,
           s.max_bytes, group_->name());
  if (n == 0) return;
  WorkspaceView v = s.view;
  for (int r = 0; r < v.world; ++r) v.data[r] = static_cast<char*>(heap.peer(r)) + offset_bytes;
  Launch l;
  l.vec = bytes % 16 == 0 && aligned(local, 16);
  const int64_t units = l.vec ? bytes / 16 : n;
  l.threads = int(tunables().cuda_threads) / 32 * 32;
  const int per_sm = s.sharing > 1 ? 1 : int(tunables().cuda_blocks_per_sm);
  l.blocks = blocks_for((units + v.world - 1) / v.world, l.threads, 4, per_sm * s.sms);
  int err = launch_two_shot(v, n, type, op, l, stream);
  SF_CUDA_CHECK(cudaError_t(err));
}

void Communicator::synchronize(void* stream) {
  SF_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  check();
}

void Communicator::check() {
  State& s = *state_;
  int status = 0;
  SF_CUDA_CHECK(cudaMemcpy(&status, s.view.status, sizeof status, cudaMemcpyDeviceToHost));
  if (status == 0) return;
  int peer = group_->global_rank(status - 1);
  s.failed = true;
  s.failure = fmt::format("rank {} did not arrive", peer);
  throw_error(ErrorCode::Timeout,
              "cuda all_reduce: timed out after {} s in group '{}' on rank {} waiting for rank {} "
              "(a GPU kernel gave up waiting for the peer's signal)",
              s.timeout_s, group_->name(), group_->global_rank(group_->rank()), peer);
}

}  // namespace symmflow::cuda
