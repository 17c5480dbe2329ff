// Contract in ipc.hpp.
#include "runtime/cuda/ipc.hpp"

#include <cuda.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "runtime/cuda/check.hpp"

namespace symmflow::cuda::ipc {

namespace {

// The driver entry points used here, looked up once.
struct Driver {
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long) = nullptr;
  CUresult (*granularity)(size_t*, const CUmemAllocationProp*,
                          CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long) = nullptr;
  CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*free_address)(CUdeviceptr, size_t) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*export_handle)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                            unsigned long long) = nullptr;
  CUresult (*import_handle)(CUmemGenericAllocationHandle*, void*,
                            CUmemAllocationHandleType) = nullptr;
};

template <typename F>
void lookup(const char* name, F& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  SF_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &status));
  SF_CHECK(p && status == cudaDriverEntryPointSuccess,
           "cuda: the driver has no {} (GPU memory shared between processes needs it)", name);
  fn = reinterpret_cast<F>(p);
}

const Driver& driver() {
  static const Driver d = [] {
    Driver x;
    lookup("cuMemCreate", x.create);
    lookup("cuMemGetAllocationGranularity", x.granularity);
    lookup("cuMemAddressReserve", x.reserve);
    lookup("cuMemMap", x.map);
    lookup("cuMemSetAccess", x.access);
    lookup("cuMemUnmap", x.unmap);
    lookup("cuMemAddressFree", x.free_address);
    lookup("cuMemRelease", x.release);
    lookup("cuMemExportToShareableHandle", x.export_handle);
    lookup("cuMemImportFromShareableHandle", x.import_handle);
    return x;
  }();
  return d;
}

void check(CUresult r, const char* what) {
  SF_CHECK(r == CUDA_SUCCESS, "cuda: {} failed (CUresult {})", what, int(r));
}

CUmemAllocationProp prop_for(int device) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}

// Reserves an address range for `m.handle` and maps it with read/write access for `device`.
void map_here(Mapping& m, int device) {
  const Driver& d = driver();
  CUdeviceptr va = 0;
  check(d.reserve(&va, m.size, 0, 0, 0), "cuMemAddressReserve");
  check(d.map(va, m.size, 0, m.handle, 0), "cuMemMap");
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check(d.access(va, m.size, &access, 1), "cuMemSetAccess");
  m.ptr = reinterpret_cast<void*>(va);
}

sockaddr_un address_of(int pid, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string name = fmt::format("symmflow-ipc-{}", pid);
  std::memcpy(a.sun_path + 1, name.data(), name.size());  // abstract: leading NUL
  len = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

struct Socket {
  std::mutex mutex;
  int fd = -1;
  std::map<std::pair<std::string, int>, int> pending;  // (key, member) -> received descriptor
};
Socket& socket_state() {
  static Socket s;
  return s;
}

struct Tag {
  char key[96];
  int member;
};

}  // namespace

Mapping create(int device, size_t bytes) {
  const Driver& d = driver();
  CUmemAllocationProp p = prop_for(device);
  size_t granularity = 0;
  check(d.granularity(&granularity, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
        "cuMemGetAllocationGranularity");
  Mapping m;
  m.size = (std::max<size_t>(bytes, 1) + granularity - 1) / granularity * granularity;
  check(d.create(&m.handle, m.size, &p, 0), "cuMemCreate");
  map_here(m, device);
  return m;
}

int export_fd(const Mapping& m) {
  int fd = -1;
  check(driver().export_handle(&fd, m.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        "cuMemExportToShareableHandle");
  return fd;
}

Mapping import(int fd, size_t size, int device) {
  Mapping m;
  m.size = size;
  check(driver().import_handle(&m.handle, reinterpret_cast<void*>(uintptr_t(fd)),
                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
        "cuMemImportFromShareableHandle");
  map_here(m, device);
  return m;
}

void release(const Mapping& m) {
  if (!m.ptr) return;
  const Driver& d = driver();
  d.unmap(CUdeviceptr(m.ptr), m.size);
  d.free_address(CUdeviceptr(m.ptr), m.size);
  d.release(m.handle);
}

int bind_socket() {
  Socket& s = socket_state();
  std::lock_guard lock(s.mutex);
  if (s.fd < 0) {
    int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    SF_CHECK(fd >= 0, "cuda: socket() failed: {}", std::strerror(errno));
    socklen_t len = 0;
    sockaddr_un a = address_of(int(::getpid()), len);
    SF_CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&a), len) == 0,
             "cuda: cannot bind the descriptor socket of process {}: {}", ::getpid(),
             std::strerror(errno));
    s.fd = fd;
  }
  return int(::getpid());
}

void send_fd(int pid, const std::string& key, int member, int fd) {
  Socket& s = socket_state();
  Tag tag{};
  SF_CHECK(key.size() < sizeof tag.key, "cuda: descriptor key '{}' too long", key);
  std::memcpy(tag.key, key.data(), key.size());
  tag.member = member;
  iovec io{&tag, sizeof tag};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  socklen_t len = 0;
  sockaddr_un a = address_of(pid, len);
  msg.msg_name = &a;
  msg.msg_namelen = len;
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  SF_CHECK(::sendmsg(s.fd, &msg, 0) == ssize_t(sizeof tag),
           "cuda: sending a GPU memory descriptor to process {} failed: {}", pid,
           std::strerror(errno));
}

int receive_fd(const std::string& key, int member, double timeout_s, const std::string& what) {
  Socket& s = socket_state();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::lock_guard lock(s.mutex);
  for (;;) {
    if (auto it = s.pending.find({key, member}); it != s.pending.end()) {
      int fd = it->second;
      s.pending.erase(it);
      return fd;
    }
    const double left =
        std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      throw_error(ErrorCode::Timeout,
                  "{}: timed out after {} s waiting for the GPU memory of group member {}", what,
                  timeout_s, member);
    }
    timeval tv{long(left), long((left - double(long(left))) * 1e6)};
    ::setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    Tag tag{};
    iovec io{&tag, sizeof tag};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &io;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(s.fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    SF_CHECK(n == ssize_t(sizeof tag), "cuda: receiving a GPU memory descriptor failed: {}",
             n < 0 ? std::strerror(errno) : "short message");
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    SF_CHECK(c && c->cmsg_type == SCM_RIGHTS, "cuda: a descriptor message carried no descriptor");
    int fd = -1;
    std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
    s.pending[{std::string(tag.key), tag.member}] = fd;
  }
}

}  // namespace symmflow::cuda::ipc
