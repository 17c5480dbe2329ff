// Host shared-memory blocks of the `store` transport: Note [store shared memory] in
// host_memory.hpp.
#include "host_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

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

HostBlock HostBlock::create(size_t bytes) {
  static std::atomic<uint64_t> counter{0};
  HostBlock b;
  b.mapped_ = host_block_bytes(bytes);
  int fd = -1;
  for (int attempt = 0; attempt < 64 && fd < 0; ++attempt) {
    b.name_ = fmt::format("/symmflow.{}.{}", ::getpid(), counter++);
    fd = ::shm_open(b.name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0)
    throw_error(ErrorCode::System, "cannot create host shared memory {}: {}", b.name_,
                std::strerror(errno));
  b.owned_name_ = true;
  if (::ftruncate(fd, off_t(b.mapped_)) != 0) {
    int err = errno;
    ::close(fd);
    throw_error(ErrorCode::System, "cannot size host shared memory {} to {} bytes: {}", b.name_,
                b.mapped_, std::strerror(err));
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

HostBlock HostBlock::open(const std::string& name, size_t bytes) {
  HostBlock b;
  b.name_ = name;
  b.mapped_ = host_block_bytes(bytes);
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0)
    throw_error(ErrorCode::System,
                "cannot open host shared memory {}: {} (do the ranks share /dev/shm?)", name,
                std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || size_t(st.st_size) < b.mapped_) {
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
