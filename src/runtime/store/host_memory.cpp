// Host shared-memory blocks of the `store` transport: Note [store shared memory] in
// host_memory.hpp.
#include "host_memory.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "symmflow/core/error.hpp"

namespace symmflow {

size_t host_block_bytes(size_t bytes) {
  size_t page = size_t(::sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 1) + page - 1) / page * page;
}

HostBlock& HostBlock::operator=(HostBlock&& o) noexcept {
  if (this != &o) {
    release();
    data_ = o.data_;
    mapped_ = o.mapped_;
    name_ = std::move(o.name_);
    owned_name_ = o.owned_name_;
    o.data_ = nullptr;
    o.mapped_ = 0;
    o.owned_name_ = false;
  }
  return *this;
}

HostBlock::~HostBlock() {
  release();
}

void HostBlock::release() {
  unlink();
  if (data_) ::munmap(data_, mapped_);
  data_ = nullptr;
  mapped_ = 0;
}

void HostBlock::unlink() {
  if (owned_name_) ::shm_unlink(name_.c_str());
  owned_name_ = false;
}

namespace {

constexpr const char* kShmDir = "/dev/shm";  // where glibc's shm_open keeps its names

// This process's pid namespace (its inode), part of every block's name: a pid means something
// only within its namespace, and containers may share /dev/shm without sharing pids.
uint64_t pid_namespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? uint64_t(st.st_ino) : 0;
}

[[noreturn]] void out_of_shm(size_t need, uint64_t free) {
  throw_error(ErrorCode::System, "{}", out_of_shm_text(need, free));
}

// Reserves every page of the block now (Note [store shared memory]): without it a tmpfs that
// fills up later kills the process that touches the page with SIGBUS.
void reserve_pages(int fd, size_t bytes, const std::string& name) {
  uint64_t free = free_shm_bytes();
  if (free != UINT64_MAX && free < bytes) out_of_shm(bytes, free);
  int rc = ::posix_fallocate(fd, 0, off_t(bytes));
  if (rc == ENOSPC) out_of_shm(bytes, free_shm_bytes());
  if (rc != 0)
    throw_error(ErrorCode::System, "cannot reserve {} bytes of host shared memory {}: {}", bytes,
                name, std::strerror(rc));
}

}  // namespace

uint64_t free_shm_bytes() {
  struct statvfs fs {};
  if (::statvfs(kShmDir, &fs) != 0) return UINT64_MAX;  // unknown: let fallocate decide
  return uint64_t(fs.f_bavail) * uint64_t(fs.f_frsize);
}

std::string out_of_shm_text(uint64_t need, uint64_t free) {
  return fmt::format(
      "out of shared memory in {}: need {} bytes, free {} bytes (make it larger, e.g. docker "
      "run --shm-size, or the heap smaller)",
      kShmDir, need, free);
}

void sweep_host_blocks(int dead_pid) {
  DIR* dir = ::opendir(kShmDir);
  if (!dir) return;
  uint64_t ns = pid_namespace();
  int me = ::getpid();
  while (dirent* e = ::readdir(dir)) {
    uint64_t their_ns = 0, n = 0;
    int pid = 0, used = 0;
    if (std::sscanf(e->d_name, "symmflow.%" SCNu64 ".%d.%" SCNu64 "%n", &their_ns, &pid, &n,
                    &used) != 3 ||
        e->d_name[used] != '\0' || their_ns != ns || pid <= 0 || pid == me)
      continue;
    if (dead_pid != 0 ? pid != dead_pid : !(::kill(pid, 0) != 0 && errno == ESRCH)) continue;
    struct stat st {};
    if (::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode) || st.st_uid != ::geteuid())
      continue;
    ::shm_unlink((std::string("/") + e->d_name).c_str());
  }
  ::closedir(dir);
}

HostBlock HostBlock::create(size_t bytes) {
  static std::atomic<uint64_t> counter{0};
  static std::once_flag swept;
  std::call_once(swept, [] { sweep_host_blocks(0); });  // Note [store shared memory]: leaks
  static const uint64_t ns = pid_namespace();
  HostBlock b;
  b.mapped_ = host_block_bytes(bytes);
  int fd = -1;
  for (int attempt = 0; attempt < 64 && fd < 0; ++attempt) {
    b.name_ = fmt::format("/symmflow.{}.{}.{}", ns, ::getpid(), counter++);
    fd = ::shm_open(b.name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0)
    throw_error(ErrorCode::System, "cannot create host shared memory {}: {}", b.name_,
                std::strerror(errno));
  b.owned_name_ = true;  // from here on, a throw unlinks the name (release)
  if (::ftruncate(fd, off_t(b.mapped_)) != 0) {
    int err = errno;
    ::close(fd);
    throw_error(ErrorCode::System, "cannot size host shared memory {} to {} bytes: {}", b.name_,
                b.mapped_, std::strerror(err));
  }
  try {
    reserve_pages(fd, b.mapped_, b.name_);
  } catch (...) {
    ::close(fd);
    throw;
  }
  void* p = ::mmap(nullptr, b.mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED)
    throw_error(ErrorCode::System, "cannot map host shared memory {} ({} bytes): {}", b.name_,
                b.mapped_, std::strerror(err));
  b.data_ = p;
  return b;
}

// Note [foreign blocks]: the name of a peer's block comes from the store, and the store may be
// one that other local processes can write (a c10d TCPStore has no authentication). So a name is
// opened only when it is one symmflow makes ("/symmflow.<ns>.<pid>.<n>", no other path), and the
// object it names only when it is a regular object of this user that no one else may read or
// write (mode 0600, as create() makes it): a block planted by another user, or left readable by
// others, is refused, never mapped (issue 39 item 7).
namespace {
bool symmflow_block_name(const std::string& name) {
  const std::string head = "/symmflow.";
  if (name.rfind(head, 0) != 0 || name.size() > 96) return false;
  int dots = 0;
  for (size_t i = head.size(); i < name.size(); ++i) {
    if (name[i] == '.' && i > head.size() && name[i - 1] != '.') {
      ++dots;
    } else if (name[i] < '0' || name[i] > '9') {
      return false;
    }
  }
  return dots == 2 && name.back() != '.';
}
}  // namespace

HostBlock HostBlock::open(const std::string& name, size_t bytes) {
  HostBlock b;
  b.name_ = name;
  b.mapped_ = host_block_bytes(bytes);
  if (!symmflow_block_name(name))
    throw_error(ErrorCode::System,
                "refusing host shared memory '{}': not a name symmflow makes "
                "(/symmflow.<ns>.<pid>.<n>); the store handed this rank another name (Note "
                "[foreign blocks])",
                name);
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0)
    throw_error(ErrorCode::System,
                "cannot open host shared memory {}: {} (do the ranks share /dev/shm?)", name,
                std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & 077) != 0) {
    ::close(fd);
    throw_error(ErrorCode::System,
                "refusing host shared memory {}: it belongs to uid {} with mode {:04o}, not to this "
                "process's user (uid {}) with mode 0600 as symmflow makes it; another process may "
                "have planted it (Note [foreign blocks])",
                name, st.st_uid, st.st_mode & 07777, ::geteuid());
  }
  if (size_t(st.st_size) < b.mapped_) {
    ::close(fd);
    throw_error(ErrorCode::System, "host shared memory {} has {} bytes, expected {}", name,
                size_t(st.st_size), b.mapped_);
  }
  void* p = ::mmap(nullptr, b.mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED)
    throw_error(ErrorCode::System, "cannot map host shared memory {}: {}", name,
                std::strerror(err));
  b.data_ = p;
  return b;
}

}  // namespace symmflow
