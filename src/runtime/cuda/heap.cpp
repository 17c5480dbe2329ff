// DeviceHeap: GPU symmetric memory of one process's GPUs (cuda.hpp).
// Contract: allocate() runs the same validated rendezvous as SymmetricHeap (a mismatch of
// allocation number or size raises on every member before anything is allocated), then each
// member allocates its block on its own GPU and the members exchange their blocks through a
// process-wide table; every member's heap owns all blocks jointly, so a block is freed only when
// the last member dropped it and a late store from a peer never lands in freed memory. Members in
// different processes (mpirun) share their blocks as file descriptors instead (Note [GPU memory
// between processes]).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include <cuda_runtime_api.h>
#include <unistd.h>
#include <fmt/format.h>

#include "runtime/cuda/check.hpp"
#include "runtime/cuda/ipc.hpp"
#include "runtime/rendezvous.hpp"
#include "symmflow/runtime/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow::cuda {

namespace {

// Note [ranks sharing a GPU]: when several rank threads drive one GPU, one rank's collective
// kernel spins on that GPU until its peers' kernels arrive, so nothing a rank does may wait for
// the whole device: zeroing and synchronization are stream-ordered, a copy between host and GPU
// first waits for the rank's stream (a pageable copy waits inside the driver, where it was seen to
// stall the peers' launches until their kernels timed out), regular memory comes from the
// stream-ordered allocator, a heap block (cudaFree synchronizes the device) is freed only when
// no other rank thread is bound to its GPU, else at process exit, and bind_device() runs the
// device inits once per GPU, with which the kernels layer loads its kernels up front (CUDA loads
// a kernel lazily at its first launch, and a load may wait for the kernels running on the device;
// src/kernels/cuda/preload.cpp).
std::mutex& bound_mutex() {
  static std::mutex m;
  return m;
}
std::map<int, int>& bound_threads() {  // device -> rank threads bound to it now
  static std::map<int, int> m;
  return m;
}
std::vector<DeviceInit>& device_inits() {  // add_device_init; run under bound_mutex()
  static std::vector<DeviceInit> v;
  return v;
}
std::vector<void*>& deferred_frees() {
  static std::vector<void*> v;
  return v;
}

struct Block {
  void* ptr = nullptr;
  int device = 0;
  ipc::Mapping mapping;  // memory shared between processes (ptr == mapping.ptr)
  ~Block() {
    if (mapping.ptr) {
      ipc::release(mapping);
      return;
    }
    if (!ptr) return;
    {
      std::lock_guard lock(bound_mutex());
      if (bound_threads()[device] > 1) {
        deferred_frees().push_back(ptr);  // Note [ranks sharing a GPU]
        return;
      }
    }
    int saved = 0;
    cudaGetDevice(&saved);
    cudaSetDevice(device);
    cudaFree(ptr);
    cudaSetDevice(saved);
  }
};

struct Table {
  std::mutex mutex;
  // key -> (blocks by member index, members that took their copy)
  std::map<std::string, std::pair<std::vector<std::shared_ptr<Block>>, size_t>> slots;
};
Table& table() {
  static Table t;
  return t;
}

}  // namespace

// Note [GPU memory between processes]: under mpirun every rank is a process of its own, so a
// peer's cudaMalloc pointer means nothing here. Each member creates its block with cuMemCreate,
// learns every member's pid, GPU and block size from one allgather (after binding its descriptor
// socket, so peers can send to it), sends its block's descriptor to every peer, and imports and
// maps each peer's (ipc.hpp). Blocks stay mapped until the heap is destroyed; the driver keeps
// the memory until the last process that imported it releases it.
// The blocks of the members whose memory one heap of `group` maps together (Group::
// region_members(): every member, or this host's when the group spans hosts, Note [spanning
// groups]), by region index.
static std::vector<std::shared_ptr<Block>> share_between_processes(Group& group, size_t bytes,
                                                                   std::string_view op,
                                                                   uint64_t seq) {
  const std::string key = fmt::format("{}:{}", group.name(), seq);
  const size_t me = size_t(group.region_index(group.rank()));
  auto mine = std::make_shared<Block>();
  SF_CUDA_CHECK(cudaGetDevice(&mine->device));
  mine->mapping = ipc::create(mine->device, std::max<size_t>(bytes, 256));
  mine->ptr = mine->mapping.ptr;
  auto stream = static_cast<cudaStream_t>(current_stream());
  SF_CUDA_CHECK(cudaMemsetAsync(mine->ptr, 0, mine->mapping.size, stream));
  SF_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int pid = ipc::bind_socket();
  // Every member announces itself (in group order); the region's announcements are kept.
  std::vector<std::string> all = group.allgather(
      fmt::format("{} {} {}", pid, mine->device, mine->mapping.size), op);
  struct Peer {
    int pid = 0, device = 0;
    size_t size = 0;
  };
  std::vector<Peer> peers(group.region_members().size());
  for (int r = 0; r < group.size(); ++r) {
    const int m = group.region_index(r);
    if (m < 0) continue;
    Peer& p = peers[size_t(m)];
    SF_CHECK(std::sscanf(all[size_t(r)].c_str(), "%d %d %zu", &p.pid, &p.device, &p.size) == 3,
             "{}: bad GPU memory announcement '{}' from group member {}", op, all[size_t(r)], r);
  }
  const int fd = ipc::export_fd(mine->mapping);
  for (size_t m = 0; m < peers.size(); ++m) {
    if (m != me) ipc::send_fd(peers[m].pid, key, int(me), fd);
  }
  ::close(fd);
  std::vector<std::shared_ptr<Block>> blocks(peers.size());
  blocks[me] = mine;
  for (size_t m = 0; m < peers.size(); ++m) {
    if (m == me) continue;
    const int peer_fd = ipc::receive_fd(key, int(m), group.bootstrap().timeout_s(), std::string(op));
    auto b = std::make_shared<Block>();
    b->device = peers[m].device;
    try {
      b->mapping = ipc::import(peer_fd, peers[m].size, mine->device);
    } catch (...) {
      ::close(peer_fd);
      throw;
    }
    ::close(peer_fd);
    b->ptr = b->mapping.ptr;
    blocks[m] = std::move(b);
  }
  return blocks;
}

struct DeviceHeap::Blocks {
  std::vector<std::shared_ptr<Block>> all;
  size_t mine = 0;
};

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

void add_device_init(DeviceInit init) {
  std::lock_guard lock(bound_mutex());
  device_inits().push_back(init);
}

int bind_device() {
  int n = device_count();
  SF_CHECK(n > 0, "cuda: no GPU is visible to this process");
  Runtime* rt = Runtime::current_or_null();
  int dev = rt ? rt->rank() % n : 0;
  SF_CUDA_CHECK(cudaSetDevice(dev));
  set_device_allocator(DeviceType::cuda, &allocate_device);
  thread_local struct ThreadStream {
    cudaStream_t stream = nullptr;
    int device = -1;
    void release() {
      set_thread_device(Device::cpu());
      if (stream) cudaStreamDestroy(stream);
      stream = nullptr;
      if (device < 0) return;
      std::lock_guard lock(bound_mutex());
      --bound_threads()[device];
      device = -1;
    }
    ~ThreadStream() { release(); }
  } own;
  if (own.device != dev) {
    own.release();
    SF_CUDA_CHECK(cudaStreamCreateWithFlags(&own.stream, cudaStreamNonBlocking));
    own.device = dev;
    std::lock_guard lock(bound_mutex());
    ++bound_threads()[dev];
  }
  set_current_stream(own.stream);
  set_thread_device(Device::cuda(dev));
  {
    static std::mutex init_mutex;
    static std::set<int> initialized;
    std::lock_guard lock(init_mutex);
    if (initialized.count(dev) == 0) {  // Note [ranks sharing a GPU]
      std::vector<DeviceInit> inits;
      {
        std::lock_guard bound(bound_mutex());
        inits = device_inits();
      }
      for (DeviceInit init : inits) init();
      initialized.insert(dev);
    }
  }
  // Peer access is a property of the context: enabled once per (device, peer) in this process.
  static std::mutex mutex;
  static std::set<std::pair<int, int>> enabled;
  std::lock_guard lock(mutex);
  for (int p = 0; p < n; ++p) {
    if (p == dev || enabled.count({dev, p})) continue;
    int ok = 0;
    SF_CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, dev, p));
    SF_CHECK(ok,
             "cuda: GPU {} cannot access GPU {} directly (no NVLink or PCIe peer access); the "
             "cuda transport needs peer access between all GPUs of a group",
             dev, p);
    SF_CUDA_CHECK(cudaDeviceEnablePeerAccess(p, 0));
    enabled.insert({dev, p});
  }
  return dev;
}

std::shared_ptr<DeviceHeap> DeviceHeap::allocate(std::shared_ptr<Group> group, size_t bytes,
                                                 std::string_view op) {
  // Note [spanning groups]: a group across hosts maps the memory of this host's members only
  // (its collectives go through NCCL: Note [nccl engine] in src/kernels/cuda/collectives/nccl.cpp).
  uint64_t seq = validate_symmetric_request(*group, bytes, op);
  if (group->bootstrap().transport() != Transport::threads) {
    auto heap = std::shared_ptr<DeviceHeap>(new DeviceHeap());
    heap->blocks_ = std::make_shared<Blocks>();
    heap->blocks_->mine = size_t(group->region_index(group->rank()));
    heap->blocks_->all = share_between_processes(*group, bytes, op, seq);
    heap->group_ = std::move(group);
    heap->bytes_ = bytes;
    return heap;
  }
  auto block = std::make_shared<Block>();
  SF_CUDA_CHECK(cudaGetDevice(&block->device));
  size_t size = std::max<size_t>(bytes, 256);
  SF_CUDA_CHECK(cudaMalloc(&block->ptr, size));
  // Stream-ordered: a device-wide synchronization would wait for a peer's collective kernel on a
  // shared GPU, which waits for this rank (Note [ranks sharing a GPU]).
  auto stream = static_cast<cudaStream_t>(current_stream());
  SF_CUDA_CHECK(cudaMemsetAsync(block->ptr, 0, size, stream));
  SF_CUDA_CHECK(cudaStreamSynchronize(stream));
  // Per region: the members of each simulated host of a spanning group meet in a table of their
  // own (Note [spanning groups]).
  std::string key = fmt::format("{}:{}:{}", group->name(), seq, group->region_members().front());
  size_t index = size_t(group->region_index(group->rank()));
  size_t members = group->region_members().size();
  {
    std::lock_guard lock(table().mutex);
    auto& slot = table().slots[key];
    slot.first.resize(members);
    slot.first[index] = block;
  }
  group->allgather("", op);  // every member stored its block
  auto blocks = std::make_shared<Blocks>();
  blocks->mine = index;
  {
    std::lock_guard lock(table().mutex);
    auto it = table().slots.find(key);
    blocks->all = it->second.first;
    if (++it->second.second == members) table().slots.erase(it);
  }
  auto heap = std::shared_ptr<DeviceHeap>(new DeviceHeap());
  heap->group_ = std::move(group);
  heap->blocks_ = std::move(blocks);
  heap->bytes_ = bytes;
  return heap;
}

DeviceHeap::~DeviceHeap() = default;

void* DeviceHeap::local() const {
  return blocks_->all[blocks_->mine]->ptr;
}
int DeviceHeap::device() const { return blocks_->all[blocks_->mine]->device; }
// A member of another host has no block here (Note [spanning groups]).
static size_t block_index(const Group& group, int group_rank) {
  if (group.spans_hosts()) group.host_peer(group_rank, "cuda::DeviceHeap");  // raises
  return size_t(group.region_index(group_rank));
}
int DeviceHeap::device_of(int group_rank) const {
  return blocks_->all.at(block_index(*group_, group_rank))->device;
}
void* DeviceHeap::peer(int group_rank) const {
  return blocks_->all.at(block_index(*group_, group_rank))->ptr;
}

}  // namespace symmflow::cuda
