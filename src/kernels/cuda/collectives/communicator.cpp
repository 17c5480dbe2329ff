// cuda::Communicator (kernels/cuda.hpp): the workspace of the GPU collectives of one group (device
// heaps of runtime/cuda) and the host side of their calls (argument checks, algorithm choice by
// the one rule of kernels/algorithm.hpp, launch shape, failure reporting), and each rank thread's
// communicator per group. The kernels and their protocol are in all_reduce.cu (Note [cuda
// all-reduce]) and exchange.cu (Note [cuda exchange]). At world size 1 an all-reduce is a copy.
// Collectives of a file of their own reach the workspace through WorkspaceAccess
// (workspace_access.hpp, Note [one file per collective]).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "kernels/cuda/collectives/call_signature.hpp"
#include "kernels/cuda/collectives/workspace_access.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/kernels/algorithm.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::cuda {

static_assert(kLLMaxBytes == kernels::kCudaLLMaxBytes,
              "one rule of algorithms (kernels/algorithm.hpp)");

using kernels::AllReduceAlgorithm;

ElemType elem_type(DType d, std::string_view op) {
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
  invalid_usage("{}: dtype {} is not supported on the GPU (f32, bf16, f16)", op, dtype_name(d));
}

ReduceKind reduce_kind(std::string_view name, std::string_view op) {
  if (name == "sum") return ReduceKind::sum;
  if (name == "avg") return ReduceKind::avg;
  if (name == "max") return ReduceKind::max;
  if (name == "min") return ReduceKind::min;
  invalid_usage("{}: unknown reduce_op '{}' (valid: sum, avg, max, min)", op, name);
}

int blocks_for(int64_t units, int threads, int per_thread, int limit) {
  int64_t want = (units + int64_t(threads) * per_thread - 1) / (int64_t(threads) * per_thread);
  return int(std::clamp<int64_t>(want, 1, std::min(limit, kMaxBlocks)));
}

int unit_of(std::initializer_list<uintptr_t> values) {
  uintptr_t all = 16;
  for (uintptr_t v : values) all |= v;
  return int(all & (~all + 1));  // lowest set bit, at most 16
}

namespace {

bool aligned(const void* p, uintptr_t to) {
  return reinterpret_cast<uintptr_t>(p) % to == 0;
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
  std::shared_ptr<DeviceHeap> staging, flags, ll, signals;
  void* words = nullptr;  // calls, done, status, put_done (this rank only)
  int* report = nullptr;  // pinned, mapped: {status, peer's signature, own signature}
  std::vector<std::string> ops;  // ops[code - 1]: the op names that status codes refer to
  int device = 0;
  int sms = 1;      // multiprocessors this rank's collectives may occupy
  int sharing = 1;  // members of the group on the most crowded GPU of the group
  size_t max_bytes = 0;
  double timeout_s = 0;
  bool failed = false;
  std::string failure;
  WorkspaceView view{};
  // The view for a call of `op` with signature `sig` (Note [gpu collective agreement]):
  // failures it records name the op.
  WorkspaceView view_for(std::string_view op, uint32_t sig) {
    auto it = std::find(ops.begin(), ops.end(), op);
    if (it == ops.end()) it = ops.insert(ops.end(), std::string(op));
    WorkspaceView v = view;
    v.op = int(it - ops.begin()) + 1;
    v.sig = sig;
    return v;
  }
  // Raises a failure recorded by an earlier call's kernel (the host-mapped report, one load), or
  // the one raised before, or the group's poison: a member's failure, or the world's (Note
  // [poisoned groups] in group.hpp).
  void check_usable(std::string_view op, const Group& group) {
    if (!failed && static_cast<volatile int*>(report)[0] != 0) raise_recorded(group);
    SF_CHECK(!failed,
             "{}: the cuda communicator of group '{}' failed earlier ({}); the group is poisoned: "
             "create a new group to go on",
             op, group.name(), failure);
    group.check_alive(op);
  }
  [[noreturn]] void raise_recorded(const Group& group);
  ~State() {
    cudaSetDevice(device);
    if (words) cudaFree(words);
    if (report) cudaFreeHost(report);
  }
};

std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Group> group, size_t max_bytes) {
  const int w = group->size();
  // Note [nccl engine]: a group across hosts has no peers' memory to work on; its ops go to NCCL.
  SF_CHECK(!group->spans_hosts(),
           "cuda::Communicator: group '{}' spans {} hosts; its collectives go through NCCL "
           "(internal: an op reached the symmetric-memory path)",
           group->name(), group->hosts());
  SF_CHECK(w <= kMaxRanks, "cuda::Communicator: group '{}' has {} ranks; at most {} are supported",
           group->name(), w, kMaxRanks);
  auto c = std::unique_ptr<Communicator>(new Communicator());
  auto s = std::make_unique<State>();
  SF_CUDA_CHECK(cudaGetDevice(&s->device));
  SF_CUDA_CHECK(cudaDeviceGetAttribute(&s->sms, cudaDevAttrMultiProcessorCount, s->device));
  s->max_bytes = (std::max<size_t>(max_bytes, 16) + 255) / 256 * 256;
  s->timeout_s = group->bootstrap().timeout_s();
  s->staging = DeviceHeap::allocate(group, 2 * size_t(w) * s->max_bytes, "cuda::Communicator");
  s->flags =
      DeviceHeap::allocate(group, size_t(kFlagWords + kSigWords) * 4, "cuda::Communicator");
  const size_t ll_bytes = 2 * size_t(std::min<int64_t>(kLLMaxBytes, int64_t(s->max_bytes)));
  s->ll = DeviceHeap::allocate(group, 2 * size_t(w) * ll_bytes, "cuda::Communicator");
  const int channels = int(tunables().signal_channels);
  const size_t pad_bytes = size_t(channels) * kMaxRanks * 4;
  s->signals = DeviceHeap::allocate(group, pad_bytes, "cuda::Communicator");
  // Ranks that share a GPU split its multiprocessors (bind_device()).
  // Every member takes the share of the most crowded GPU, so launch shapes agree (block b of
  // every member handles the same elements) when members are spread unevenly, such as 3 ranks
  // on 2 GPUs; per-GPU shares gave the lone rank twice the blocks, whose flags never came.
  s->sharing = 1;
  for (int r = 0; r < w; ++r) {
    int on_its_gpu = 0;
    for (int q = 0; q < w; ++q) on_its_gpu += s->staging->device_of(q) == s->staging->device_of(r);
    s->sharing = std::max(s->sharing, on_its_gpu);
  }
  s->sms = std::max(1, s->sms / s->sharing);
  SF_CUDA_CHECK(cudaMalloc(&s->words, 64 + pad_bytes));
  auto stream = static_cast<cudaStream_t>(current_stream());  // Note [ranks sharing a GPU]
  SF_CUDA_CHECK(cudaMemsetAsync(s->words, 0, 64 + pad_bytes, stream));
  SF_CUDA_CHECK(cudaStreamSynchronize(stream));
  SF_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&s->report), 4 * sizeof(int),
                              cudaHostAllocMapped | cudaHostAllocPortable));
  std::fill_n(s->report, 4, 0);
  WorkspaceView& v = s->view;
  void* report_on_device = nullptr;
  SF_CUDA_CHECK(cudaHostGetDevicePointer(&report_on_device, s->report, 0));
  v.report = static_cast<int*>(report_on_device);
  for (int r = 0; r < w; ++r) {
    v.staging[r] = static_cast<char*>(s->staging->peer(r));
    v.flags[r] = static_cast<uint32_t*>(s->flags->peer(r));
    v.sigs[r] = v.flags[r] + kFlagWords;
    v.ll[r] = static_cast<char*>(s->ll->peer(r));
    v.signals[r] = static_cast<uint32_t*>(s->signals->peer(r));
  }
  v.put_done = static_cast<uint32_t*>(s->words) + 16;
  v.channels = channels;
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
  return kernels::cuda_all_reduce_algorithm(bytes, state_->view.world, true, true) ==
                 AllReduceAlgorithm::two_shot
             ? Algo::two_shot
             : Algo::one_shot;
}

void Communicator::all_reduce(const void* in, void* out, int64_t n, DType dtype,
                              std::string_view reduce_op, void* stream, Algo algo) {
  State& s = *state_;
  s.check_usable("cuda all_reduce", *group_);
  SF_CHECK(algo != Algo::two_shot,
           "cuda all_reduce: two_shot reduces in place in GPU symmetric memory; allocate the "
           "buffer with cuda::DeviceHeap and call all_reduce_inplace");
  ElemType type = elem_type(dtype, "cuda all_reduce");
  ReduceKind op = reduce_kind(reduce_op, "cuda all_reduce");
  SF_CHECK(n >= 0, "cuda all_reduce: negative element count {}", n);
  const int64_t bytes = n * int64_t(dtype_size(dtype));
  SF_CHECK(size_t(bytes) <= s.max_bytes,
           "cuda all_reduce: {} bytes exceed the communicator's max_bytes {} (group '{}')", bytes,
           s.max_bytes, group_->name());
  if (n == 0) return;
  const AllReduceAlgorithm algorithm = kernels::cuda_all_reduce_algorithm(
      bytes, s.view.world, false, aligned(in, 8) && aligned(out, 8));
  if (algorithm == AllReduceAlgorithm::copy) {  // every reduce op of one value is the value
    if (in != out)
      SF_CUDA_CHECK(cudaMemcpyAsync(out, in, size_t(bytes), cudaMemcpyDeviceToDevice,
                                    static_cast<cudaStream_t>(stream)));
    return;
  }
  const bool ll = algorithm == AllReduceAlgorithm::one_shot_ll;
  const WorkspaceView v = s.view_for(
      "cuda all_reduce",
      call_signature({ll ? "cuda all_reduce/ll" : "cuda all_reduce/one_shot", &dtype, reduce_op,
                      uint64_t(n)}));
  Launch l;
  l.early = current_launch().early;  // Note [early launch]
  if (ll) {
    l.threads = 512;
    l.blocks = blocks_for(bytes / 8, l.threads, 1, s.sms);
    SF_CUDA_CHECK(cudaError_t(launch_one_shot_ll(v, in, out, n, type, op, l, stream)));
    return;
  }
  l.vec = bytes % 16 == 0 && aligned(in, 16) && aligned(out, 16);
  const int64_t units = l.vec ? bytes / 16 : n;
  l.threads = int(tunables().cuda_threads) / 32 * 32;
  l.blocks = blocks_for(units, l.threads, 2, s.sms);
  int err = launch_one_shot(v, in, out, n, type, op, l, stream);
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
  s.check_usable("cuda all_reduce", *group_);
  ElemType type = elem_type(dtype, "cuda all_reduce");
  ReduceKind op = reduce_kind(reduce_op, "cuda all_reduce");
  SF_CHECK(size_t(bytes) <= s.max_bytes,
           "cuda all_reduce: {} bytes exceed the communicator's max_bytes {} (group '{}')", bytes,
           s.max_bytes, group_->name());
  if (n == 0 || s.view.world == 1) return;
  WorkspaceView v = s.view_for(
      "cuda all_reduce", call_signature({"cuda all_reduce/two_shot", &dtype, reduce_op, uint64_t(n)}));
  for (int r = 0; r < v.world; ++r) v.data[r] = static_cast<char*>(heap.peer(r)) + offset_bytes;
  Launch l;
  l.early = current_launch().early;  // Note [early launch]
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

void Communicator::check_usable(std::string_view op) { state_->check_usable(op, *group_); }

void Communicator::check() {
  State& s = *state_;
  if (!s.failed && static_cast<volatile int*>(s.report)[0] != 0) s.raise_recorded(*group_);
}

void Communicator::State::raise_recorded(const Group& group) {
  const volatile int* r = report;
  const int status = r[0];
  const uint32_t theirs = uint32_t(r[1]), mine = uint32_t(r[2]);
  const int code = status >> 16, why = (status >> 8) & 255;
  const std::string op =
      code >= 1 && size_t(code) <= ops.size() ? ops[size_t(code - 1)] : "cuda collective";
  const int me = group.global_rank(group.rank());
  const int peer = group.global_rank((status & 255) - 1);
  failed = true;
  std::optional<Error> e;
  if (why == kBadSplits) {
    e.emplace(ErrorCode::InvalidUsage,
              fmt::format("{}: rank {} has invalid in_splits (a negative count, more rows sent "
                          "than its 'input' has, or more rows for a receiver than its 'out' "
                          "holds); nothing was copied (group '{}')",
                          op, peer, group.name()));
  } else if (why == kDisagree) {  // Note [gpu collective agreement] in call_signature.hpp
    e.emplace(ErrorCode::InvalidUsage,
              fmt::format("{}: the ranks of group '{}' disagree (collective agreement on the GPU; "
                          "no data was exchanged):\n{}",
                          op, group.name(), describe_disagreement(mine, me, theirs, peer)));
  } else {
    e.emplace(ErrorCode::Timeout,
              fmt::format("{}: timed out after {} s in group '{}' on rank {} waiting for rank {} "
                          "(a GPU kernel gave up waiting for the peer's signal)",
                          op, timeout_s, group.name(), me, peer));
  }
  // Every later call of this communicator repeats the whole text, the disagreement's fields too.
  failure = e->what();
  // Final for the group on every member (Note [poisoned groups]): the peers' next call raises it,
  // on the GPU or the host, and so does every plan that replays the group's collectives.
  group.poison(*e);
  throw *e;
}

CallWorkspace WorkspaceAccess::call(Communicator& comm, std::string_view op,
                                    const CallFields& fields) {
  Communicator::State& s = *comm.state_;
  s.check_usable(op, *comm.group_);
  return {s.view_for(op, call_signature(fields)), s.sms, s.max_bytes};
}

int Communicator::channels() const { return state_->view.channels; }

SignalPads Communicator::signal_pads() const {
  static_assert(sizeof(SignalPads::pad) / sizeof(void*) == kMaxRanks);
  const WorkspaceView& v = state_->view;
  SignalPads p;
  for (int r = 0; r < v.world; ++r) p.pad[r] = v.signals[r];
  p.rank = v.rank;
  p.world = v.world;
  p.channels = v.channels;
  p.timeout_ns = v.timeout_ns;
  return p;
}

void Communicator::check_signal(std::string_view op, int peer, int channel) const {
  const WorkspaceView& v = state_->view;
  SF_CHECK(peer >= 0 && peer < v.world, "{}: peer {} is not a member of group '{}' (size {})",
           op, peer, group_->name(), v.world);
  SF_CHECK(channel >= 0 && channel < v.channels,
           "{}: channel {} out of range: group '{}' has {} signal channels (tunable "
           "signal_channels)",
           op, channel, group_->name(), v.channels);
}

void Communicator::barrier(std::string_view op, void* stream) { copy({}, 0, op, stream); }

void Communicator::copy(std::span<const Copy> copies, size_t agreed_bytes, std::string_view op,
                        void* stream) {
  State& s = *state_;
  s.check_usable(op, *group_);
  SF_CHECK(copies.size() <= size_t(kMaxRanks), "{}: {} copies in one call; at most {}", op,
           copies.size(), kMaxRanks);
  if (s.view.world == 1 && copies.empty()) return;
  CopyPlan plan;
  uintptr_t unit = 16;
  for (const Copy& c : copies) {
    if (c.bytes == 0) continue;
    plan.seg[plan.count++] = {c.src, c.dst, int64_t(c.bytes)};
    unit = uintptr_t(unit_of({unit, reinterpret_cast<uintptr_t>(c.src),
                              reinterpret_cast<uintptr_t>(c.dst), c.bytes}));
  }
  if (s.view.world == 1) {  // no peer: the copies alone
    for (int k = 0; k < plan.count; ++k)
      SF_CUDA_CHECK(cudaMemcpyAsync(plan.seg[k].dst, plan.seg[k].src, size_t(plan.seg[k].bytes),
                                    cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
    return;
  }
  Launch l;
  l.threads = 512;
  l.blocks = blocks_for(int64_t(agreed_bytes) / 16, l.threads, 4, s.sms);
  const WorkspaceView v = s.view_for(op, call_signature({op, nullptr, {}, agreed_bytes}));
  SF_CUDA_CHECK(cudaError_t(launch_exchange_copy(v, plan, int(unit), l, stream)));
}

void Communicator::reduce_scatter(std::span<const void* const> srcs, void* out, int64_t outer,
                                  int64_t chunk, int64_t row_stride, DType dtype,
                                  std::string_view reduce_op, std::string_view op, void* stream) {
  State& s = *state_;
  s.check_usable(op, *group_);
  ElemType type = elem_type(dtype, op);
  ReduceKind kind = reduce_kind(reduce_op, op);
  SF_CHECK(int(srcs.size()) == s.view.world, "{}: {} sources for a group of {}", op, srcs.size(),
           s.view.world);
  ReduceScatterPlan plan;
  for (size_t p = 0; p < srcs.size(); ++p) plan.src[p] = srcs[p];
  plan.out = out;
  plan.outer = outer;
  plan.chunk = chunk;
  plan.row_stride = row_stride;
  Launch l;
  const uintptr_t size = dtype_size(dtype);
  uintptr_t all = uintptr_t(chunk) * size | uintptr_t(row_stride) * size |
                  reinterpret_cast<uintptr_t>(out);
  for (const void* p : srcs) all |= reinterpret_cast<uintptr_t>(p);
  l.vec = all % 16 == 0;  // 16-byte loads when every row and pointer allows them
  l.threads = 512;
  l.blocks = blocks_for(outer * chunk, l.threads, 4, s.sms);
  SF_CUDA_CHECK(
      cudaError_t(launch_reduce_scatter(
          s.view_for(op, call_signature({op, &dtype, reduce_op, uint64_t(outer * chunk)})), plan,
          type, kind, l, stream)));
}

void Communicator::all_to_all(std::span<const int64_t* const> splits,
                              std::span<const void* const> inputs, void* out, int64_t* meta,
                              int64_t row_bytes, int64_t in_rows, int64_t out_rows, void* stream) {
  constexpr std::string_view op = "symm_mem::all_to_all_vdev";
  State& s = *state_;
  s.check_usable(op, *group_);
  AllToAllPlan plan;
  uintptr_t unit = unit_of({uintptr_t(row_bytes), reinterpret_cast<uintptr_t>(out)});
  for (int p = 0; p < s.view.world; ++p) {
    plan.splits[p] = splits[size_t(p)];
    plan.in[p] = inputs[size_t(p)];
    unit = uintptr_t(unit_of({unit, reinterpret_cast<uintptr_t>(inputs[size_t(p)])}));
  }
  plan.out = out;
  plan.meta = meta;
  plan.row_bytes = row_bytes;
  plan.in_rows = in_rows;
  plan.out_rows = out_rows;
  Launch l;
  l.threads = 512;  // at least world^2 threads (the splits are loaded one per thread)
  l.blocks = std::min(s.sms, 32);  // the same on every member, whatever its 'out' holds
  const WorkspaceView v = s.view_for(op, call_signature({op, nullptr, {}, uint64_t(row_bytes)}));
  SF_CUDA_CHECK(cudaError_t(launch_all_to_all(v, plan, int(unit), l, stream)));
}

void Communicator::put_signal(const void* src, void* peer_dst, size_t bytes, int peer,
                              int channel, void* stream) {
  constexpr std::string_view op = "symm_mem::put_signal";
  State& s = *state_;
  s.check_usable(op, *group_);
  check_signal(op, peer, channel);
  Launch l;
  l.threads = 512;
  const int unit = unit_of({reinterpret_cast<uintptr_t>(src), reinterpret_cast<uintptr_t>(peer_dst), bytes});
  l.blocks = blocks_for(int64_t(bytes) / unit, l.threads, 4, s.sms);
  SF_CUDA_CHECK(cudaError_t(launch_put_signal(s.view_for(op, 0), src, peer_dst, int64_t(bytes), unit,
                                              peer, channel, l, stream)));
}

void Communicator::wait_signal(int peer, int channel, void* stream) {
  constexpr std::string_view op = "symm_mem::wait_signal";
  State& s = *state_;
  s.check_usable(op, *group_);
  check_signal(op, peer, channel);
  SF_CUDA_CHECK(cudaError_t(launch_wait_signal(s.view_for(op, 0), peer, channel, stream)));
}

namespace {

struct CachedCommunicator {
  std::shared_ptr<Group> group;
  size_t bytes = 0;
  std::unique_ptr<Communicator> comm;
};
thread_local std::vector<CachedCommunicator> tls_communicators;

}  // namespace

Communicator& communicator(const std::shared_ptr<Group>& group, size_t bytes) {
  auto it = std::find_if(tls_communicators.begin(), tls_communicators.end(),
                         [&](const CachedCommunicator& c) { return c.group == group; });
  if (it != tls_communicators.end() && it->bytes >= bytes) return *it->comm;
  check_not_capturing("creating the cuda communicator of a group");
  size_t size = std::max<size_t>(1 << 20, it != tls_communicators.end() ? 2 * it->bytes : 0);
  while (size < bytes) size *= 2;
  if (it == tls_communicators.end()) {
    tls_communicators.push_back({group, 0, nullptr});
    it = tls_communicators.end() - 1;
  }
  it->comm.reset();  // the old one's memory is freed once every member dropped it
  it->comm = Communicator::create(group, size);
  it->bytes = size;
  return *it->comm;
}

}  // namespace symmflow::cuda
