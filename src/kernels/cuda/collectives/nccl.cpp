// NCCL opened on first use, and the rank threads' communicators (nccl.hpp).
//
// Note [nccl engine]: a GPU group whose members run on more than one host cannot map its peers'
// memory, so its collectives go through NCCL, the engine users already trust for the network
// (issue 38: "never a home-made network path"); symmetric memory stays for the groups inside a
// host. NCCL is opened with dlopen on the first call of such a group, so nothing links it and a
// machine without it runs everything else; its functions are declared here, from NCCL's stable C
// ABI (nccl.h of 2.x: the 128-byte unique id, the result, data type and reduction enums), so no
// NCCL header is needed to build. Tried in order: $SYMMFLOW_NCCL_LIBRARY (a path: the only one
// when set); a libnccl.so.2 already loaded in the process (PyTorch's); the nvidia/nccl/lib folder
// of the wheels beside the loaded cuBLAS; the loader's search path. Each failure is named in the
// error. A communicator is made per rank thread and group, from the group's own rendezvous: its
// first member asks NCCL for a unique id and every member reads it through Group::allgather (the
// bootstrap: the store, MPI or the threads' table), then ncclCommInitRank with the group's ranks
// in group order. The allgather is bounded like every rendezvous (a member that never comes, or
// failed, is named within the timeout); NCCL's own calls are not: a peer that dies inside an NCCL
// collective would spin for good, so a plan's synchronize waits through wait() (Note [bounded
// NCCL waits]). A communicator whose call failed is aborted rather than destroyed at exit.
//
// Note [bounded NCCL waits]: wait() polls the stream (cudaStreamQuery, the pause doubling from
// 20 us to 2 ms); between polls it reads each communicator's asynchronous error
// (ncclCommGetAsyncError) and its world's failure (Bootstrap::failure: a peer that raised or
// died, on any transport), and checks the world's timeout. On any of them it aborts every NCCL
// communicator of the rank thread (ncclCommAbort ends their kernels, so the stream drains) and
// raises: PeerFailure naming the failed rank and its words, Nccl with NCCL's, or Timeout naming
// the groups. An aborted communicator refuses every later call.
#include "kernels/cuda/collectives/nccl.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "kernels/cuda/library_path.hpp"
#include "symmflow/core/error.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda::nccl {
namespace {

// ---- NCCL's C ABI (nccl.h, 2.x) ---------------------------------------------------------------
struct UniqueId {
  char internal[128];
};
using CommPtr = void*;
enum : int { kSuccess = 0, kInProgress = 7 };
enum DataType : int { kInt8 = 0, kFloat16 = 6, kFloat32 = 7, kBfloat16 = 9 };
enum RedOp : int { kSum = 0, kMax = 2, kMin = 3, kAvg = 4 };
using Stream = void*;  // cudaStream_t

struct Library {
  int (*get_version)(int*) = nullptr;
  int (*get_unique_id)(UniqueId*) = nullptr;
  int (*comm_init_rank)(CommPtr*, int, UniqueId, int) = nullptr;
  int (*comm_destroy)(CommPtr) = nullptr;
  int (*comm_abort)(CommPtr) = nullptr;
  const char* (*error_string)(int) = nullptr;
  int (*async_error)(CommPtr, int*) = nullptr;
  int (*comm_split)(CommPtr, int, int, CommPtr*, void*) = nullptr;  // 2.18+; optional
  int (*all_reduce)(const void*, void*, size_t, int, int, CommPtr, Stream) = nullptr;
  int (*reduce)(const void*, void*, size_t, int, int, int, CommPtr, Stream) = nullptr;
  int (*reduce_scatter)(const void*, void*, size_t, int, int, CommPtr, Stream) = nullptr;
  int (*all_gather)(const void*, void*, size_t, int, CommPtr, Stream) = nullptr;
  int (*broadcast)(const void*, void*, size_t, int, int, CommPtr, Stream) = nullptr;
  int (*send)(const void*, size_t, int, int, CommPtr, Stream) = nullptr;
  int (*recv)(void*, size_t, int, int, CommPtr, Stream) = nullptr;
  int (*group_start)() = nullptr;
  int (*group_end)() = nullptr;
  int version = 0;
  std::string missing;  // "" when loaded
};

template <typename F>
bool bind(void* h, const char* name, F& f, std::string& missing) {
  f = reinterpret_cast<F>(dlsym(h, name));
  if (!f) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", name);
  return f != nullptr;
}

void* open_candidate(const std::string& path, std::string& errors) {
  if (path.empty() || (path.front() == '/' && !std::filesystem::exists(path))) return nullptr;
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!h) errors += fmt::format("; {}: {}", path, dlerror());
  return h;
}

// Note [nccl engine]: the candidates in order.
void* open_nccl(std::string& errors) {
  if (const char* env = std::getenv("SYMMFLOW_NCCL_LIBRARY"); env && *env) {
    void* h = dlopen(env, RTLD_NOW | RTLD_GLOBAL);
    if (!h) errors += fmt::format("; SYMMFLOW_NCCL_LIBRARY={}: {}", env, dlerror());
    return h;
  }
  if (void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD)) return h;
  for (const std::string& path : {beside_cublas("nccl/lib/libnccl.so.2"), std::string("libnccl.so.2")})
    if (void* h = open_candidate(path, errors)) return h;
  return nullptr;
}

Library load() {
  Library lib;
  std::string errors;
  void* h = open_nccl(errors);
  if (!h) {
    lib.missing = fmt::format(
        "NCCL could not be opened (pip install nvidia-nccl-cu13, or set SYMMFLOW_NCCL_LIBRARY to "
        "a libnccl.so.2){}",
        errors);
    return lib;
  }
  std::string absent;
  bind(h, "ncclGetVersion", lib.get_version, absent);
  bind(h, "ncclGetUniqueId", lib.get_unique_id, absent);
  bind(h, "ncclCommInitRank", lib.comm_init_rank, absent);
  bind(h, "ncclCommDestroy", lib.comm_destroy, absent);
  bind(h, "ncclCommAbort", lib.comm_abort, absent);
  bind(h, "ncclGetErrorString", lib.error_string, absent);
  bind(h, "ncclCommGetAsyncError", lib.async_error, absent);
  bind(h, "ncclAllReduce", lib.all_reduce, absent);
  bind(h, "ncclReduce", lib.reduce, absent);
  bind(h, "ncclReduceScatter", lib.reduce_scatter, absent);
  bind(h, "ncclAllGather", lib.all_gather, absent);
  bind(h, "ncclBroadcast", lib.broadcast, absent);
  bind(h, "ncclSend", lib.send, absent);
  bind(h, "ncclRecv", lib.recv, absent);
  bind(h, "ncclGroupStart", lib.group_start, absent);
  bind(h, "ncclGroupEnd", lib.group_end, absent);
  if (!absent.empty()) {
    lib.missing = fmt::format("the NCCL library opened lacks {} (NCCL 2.12 or later is needed)",
                              absent);
    return lib;
  }
  lib.comm_split = reinterpret_cast<decltype(lib.comm_split)>(dlsym(h, "ncclCommSplit"));
  lib.get_version(&lib.version);
  // ncclAvg came with 2.10, send/receive groups as used here with 2.7: 2.12 is asked for.
  if (lib.version < 21200)
    lib.missing = fmt::format("NCCL {} is too old (2.12 or later is needed)", lib.version);
  return lib;
}

const Library& library() {
  static const Library lib = load();
  return lib;
}

const Library& usable(std::string_view op, const Group& g) {
  const Library& lib = library();
  SF_CHECK(lib.missing.empty(),
           "{}: group '{}' spans {} hosts, so its GPU collectives go through NCCL, but {}", op,
           g.name(), g.hosts(), lib.missing);
  return lib;
}

int data_type(DType d) {
  switch (d) {
    case DType::f32:
      return kFloat32;
    case DType::bf16:
      return kBfloat16;
    case DType::f16:
      return kFloat16;
    default:
      break;
  }
  invalid_usage("nccl: dtype {} has no NCCL reduction here (f32, bf16, f16)", dtype_name(d));
}

int red_op(ReduceKind r) {
  switch (r) {
    case ReduceKind::sum:
      return kSum;
    case ReduceKind::avg:
      return kAvg;
    case ReduceKind::max:
      return kMax;
    case ReduceKind::min:
      return kMin;
  }
  return kSum;
}

std::string to_hex(const UniqueId& id) {
  std::string s;
  for (unsigned char c : id.internal) s += fmt::format("{:02x}", c);
  return s;
}

UniqueId from_hex(const std::string& s, std::string_view op) {
  UniqueId id{};
  SF_CHECK(s.size() == 2 * sizeof id.internal, "{}: malformed NCCL unique id from the group's "
           "first member ({} characters)", op, s.size());
  for (size_t i = 0; i < sizeof id.internal; ++i)
    id.internal[i] = char(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return id;
}

struct Cached {
  std::shared_ptr<Group> group;
  std::unique_ptr<Comm> comm;
  bool cross = false;  // the split of the group's members by host index (cross())
};
thread_local std::vector<Cached> tls_comms;

}  // namespace

struct Comm::Handle {
  CommPtr comm = nullptr;
  bool failed = false;
  std::string aborted;  // why, once aborted (Note [bounded NCCL waits])
};

const std::string& unavailable() { return library().missing; }
int version() { return library().missing.empty() ? library().version : 0; }

Comm::Comm(std::shared_ptr<Group> group, std::unique_ptr<Handle> handle)
    : group_(std::move(group)), handle_(std::move(handle)) {}

Comm::~Comm() {
  const Library& lib = library();
  if (!handle_ || !handle_->comm || !handle_->aborted.empty()) return;
  // A failed communicator may have work that never ends: abort it, never wait for it.
  (handle_->failed ? lib.comm_abort : lib.comm_destroy)(handle_->comm);
}

void Comm::check_usable(std::string_view op) const {
  SF_CHECK(handle_->aborted.empty(),
           "{}: the NCCL communicator of group '{}' was aborted after an earlier failure ({}); "
           "the group cannot be used again",
           op, group_->name(), handle_->aborted);
}

void Comm::check(int result, std::string_view what, std::string_view op) const {
  if (result == kSuccess) return;
  handle_->failed = true;
  throw_error(ErrorCode::Nccl, "{}: {} failed in group '{}' on rank {}: {} (NCCL error {})", op,
              what, group_->name(), group_->bootstrap().rank(), library().error_string(result),
              result);
}

void Comm::all_reduce(const void* in, void* out, int64_t n, DType dtype, ReduceKind red,
                      std::string_view op, void* stream) {
  check_usable(op);
  check(library().all_reduce(in, out, size_t(n), data_type(dtype), red_op(red), handle_->comm,
                             stream),
        "ncclAllReduce", op);
}

void Comm::reduce(const void* in, void* out, int64_t n, DType dtype, ReduceKind red, int root,
                  std::string_view op, void* stream) {
  check_usable(op);
  check(library().reduce(in, out, size_t(n), data_type(dtype), red_op(red), root, handle_->comm,
                         stream),
        "ncclReduce", op);
}

void Comm::reduce_scatter(const void* in, void* out, int64_t n, DType dtype, ReduceKind red,
                          std::string_view op, void* stream) {
  check_usable(op);
  check(library().reduce_scatter(in, out, size_t(n), data_type(dtype), red_op(red),
                                 handle_->comm, stream),
        "ncclReduceScatter", op);
}

void Comm::all_gather(const void* in, void* out, size_t bytes, std::string_view op,
                      void* stream) {
  check_usable(op);
  check(library().all_gather(in, out, bytes, kInt8, handle_->comm, stream), "ncclAllGather", op);
}

void Comm::broadcast(void* buf, size_t bytes, int root, std::string_view op, void* stream) {
  check_usable(op);
  check(library().broadcast(buf, buf, bytes, kInt8, root, handle_->comm, stream), "ncclBroadcast",
        op);
}

void Comm::exchange(std::span<const Transfer> sends, std::span<const Transfer> receives,
                    std::string_view op, void* stream) {
  const Library& lib = library();
  check_usable(op);
  check(lib.group_start(), "ncclGroupStart", op);
  int result = kSuccess;
  for (const Transfer& t : sends) {
    if (result == kSuccess && t.bytes)
      result = lib.send(t.src, t.bytes, kInt8, t.peer, handle_->comm, stream);
  }
  for (const Transfer& t : receives) {
    if (result == kSuccess && t.bytes)
      result = lib.recv(t.dst, t.bytes, kInt8, t.peer, handle_->comm, stream);
  }
  const int ended = lib.group_end();  // always closes the group, even after a failed call
  check(result, "ncclSend/ncclRecv", op);
  check(ended, "ncclGroupEnd", op);
}

namespace {

// Aborts every NCCL communicator of this rank thread (Note [bounded NCCL waits]), then raises.
template <typename... Args>
[[noreturn]] void abort_all(const std::string& why, ErrorCode code, fmt::format_string<Args...> f,
                            Args&&... args) {
  for (Cached& c : tls_comms) c.comm->abort(why);
  throw_error(code, f, std::forward<Args>(args)...);
}

}  // namespace

void Comm::abort(const std::string& why) {
  if (!handle_->aborted.empty()) return;
  handle_->aborted = why;
  if (handle_->comm) library().comm_abort(handle_->comm);
}

void wait(void* stream, std::string_view op) {
  if (tls_comms.empty()) {
    SF_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    return;
  }
  const Library& lib = library();
  const auto start = std::chrono::steady_clock::now();
  std::string groups;
  double limit = 0;
  for (const Cached& c : tls_comms) {
    groups += fmt::format("{}'{}'", groups.empty() ? "" : ", ", c.group->name());
    limit = std::max(limit, c.group->bootstrap().timeout_s());
  }
  using std::chrono::microseconds;
  for (microseconds pause{20};; pause = std::min(2 * pause, microseconds(2000))) {
    const cudaError_t e = cudaStreamQuery(static_cast<cudaStream_t>(stream));
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) SF_CUDA_CHECK(e);
    for (const Cached& c : tls_comms) {
      const Group& g = *c.group;
      // The world's failure first: a peer's NCCL error is often its consequence.
      if (auto f = g.bootstrap().failure(); f && f->rank != g.bootstrap().rank()) {
        abort_all(fmt::format("rank {} failed", f->rank), ErrorCode::PeerFailure,
                  "{}: rank {} failed ({}) while rank {} waited for the NCCL calls of group '{}'",
                  op, f->rank, f->what, g.bootstrap().rank(), g.name());
      }
      int async = kSuccess;
      const Comm::Handle& h = *c.comm->handle_;
      if (h.aborted.empty() && lib.async_error(h.comm, &async) == kSuccess &&
          async != kSuccess && async != kInProgress) {
        abort_all(fmt::format("NCCL error {}", async), ErrorCode::Nccl,
                  "{}: NCCL reported an error in group '{}' on rank {}: {} (NCCL error {})", op,
                  g.name(), g.bootstrap().rank(), lib.error_string(async), async);
      }
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > limit) {
      abort_all(fmt::format("timed out after {} s", limit), ErrorCode::Timeout,
                "{}: timed out after {} s on rank {} waiting for the NCCL calls of group(s) {} "
                "(a member on another host never arrived); the communicators are aborted",
                op, limit, tls_comms.front().group->bootstrap().rank(), groups);
    }
    std::this_thread::sleep_for(pause);
  }
}

bool can_split() { return library().missing.empty() && library().comm_split != nullptr; }

Comm& cross(const std::shared_ptr<Group>& group, std::string_view op) {
  for (Cached& c : tls_comms)
    if (c.group == group && c.cross) return *c.comm;
  Comm& parent = comm(group, op);
  SF_CHECK(can_split(), "{}: the NCCL loaded ({}) has no ncclCommSplit (2.18 or later is needed "
           "for a hierarchical all-reduce across hosts)", op, version());
  check_not_capturing("splitting the NCCL communicator of a group");
  parent.check_usable(op);
  const std::vector<int>& across = group->cross_ranks();
  const int me = group->bootstrap().rank();
  const int key = int(std::find(across.begin(), across.end(), me) - across.begin());
  auto handle = std::make_unique<Comm::Handle>();
  parent.check(library().comm_split(parent.handle_->comm, group->host_rank_of(group->rank()), key,
                                    &handle->comm, nullptr),
               "ncclCommSplit", op);
  tls_comms.push_back({group, std::unique_ptr<Comm>(new Comm(group, std::move(handle))), true});
  return *tls_comms.back().comm;
}

Comm& comm(const std::shared_ptr<Group>& group, std::string_view op) {
  for (Cached& c : tls_comms)
    if (c.group == group && !c.cross) return *c.comm;
  const Library& lib = usable(op, *group);
  check_not_capturing("creating the NCCL communicator of a group");
  UniqueId id{};
  if (group->rank() == 0) {
    const int r = lib.get_unique_id(&id);
    SF_CHECK(r == kSuccess, "{}: ncclGetUniqueId failed: {}", op, lib.error_string(r));
  }
  // Every member learns the first member's id through the group's bootstrap (bounded).
  std::vector<std::string> ids = group->allgather(group->rank() == 0 ? to_hex(id) : "", op);
  id = from_hex(ids.at(0), op);
  auto handle = std::make_unique<Comm::Handle>();
  const int r = lib.comm_init_rank(&handle->comm, group->size(), id, group->rank());
  if (r != kSuccess) {
    throw_error(ErrorCode::Nccl, "{}: ncclCommInitRank of group '{}' ({} ranks on {} hosts) failed "
                "on rank {}: {} (NCCL error {})",
                op, group->name(), group->size(), group->hosts(), group->bootstrap().rank(),
                lib.error_string(r), r);
  }
  tls_comms.push_back({group, std::unique_ptr<Comm>(new Comm(group, std::move(handle)))});
  return *tls_comms.back().comm;
}

}  // namespace symmflow::cuda::nccl
