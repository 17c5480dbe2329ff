// The parts of the store interface common to every store: get_value (a get that names the key
// when it times out), CallbackStore (a store given as callbacks), FileStore (one file per key)
// and open_store (the "file:" / "tcp:" spellings of SYMMFLOW_STORE). Contract in store.hpp.
#include "symmflow/runtime/store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "private_files.hpp"
#include "symmflow/core/error.hpp"

namespace symmflow {

namespace {

void check_key(const std::string& key, const std::string& store) {
  SF_CHECK(!key.empty(), "{}: empty key", store);
}

[[noreturn]] void system_error(const std::string& what, const std::string& path) {
  throw_error(ErrorCode::System, "{} {}: {}", what, path, std::strerror(errno));
}

// Polls `ready` until it holds or `timeout` passes, sleeping 50 µs doubling to 5 ms.
template <typename Ready>
bool poll_until(KeyValueStore::Millis timeout, Ready&& ready) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto nap = std::chrono::microseconds(50);
  for (;;) {
    if (ready()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(5000));
  }
}

int64_t parse_counter(const std::string& text, const std::string& key, const std::string& store) {
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  SF_CHECK(!text.empty() && end && *end == '\0', "{}: key '{}' holds '{}', not a counter", store,
           key, text);
  return v;
}

}  // namespace

std::string KeyValueStore::get_value(const std::string& key, Millis timeout, std::string_view op) {
  std::optional<std::string> v = get(key, timeout);
  if (!v)
    throw_error(ErrorCode::Timeout, "{}: key '{}' was not set in {} within {} s", op, key,
                describe(), double(timeout.count()) / 1000.0);
  return *v;
}

// ---- CallbackStore ------------------------------------------------------------------------------

CallbackStore::CallbackStore(StoreCallbacks callbacks) : callbacks_(std::move(callbacks)) {
  SF_CHECK(callbacks_.set && callbacks_.get && callbacks_.wait && callbacks_.add,
           "CallbackStore: every callback (set, get, wait, add) must be given");
}
void CallbackStore::set(const std::string& key, const std::string& value) {
  check_key(key, describe());
  callbacks_.set(key, value);
}
std::optional<std::string> CallbackStore::get(const std::string& key, Millis timeout) {
  check_key(key, describe());
  return callbacks_.get(key, timeout);
}
bool CallbackStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  for (const std::string& k : keys) check_key(k, describe());
  return callbacks_.wait(keys, timeout);
}
int64_t CallbackStore::add(const std::string& key, int64_t delta) {
  check_key(key, describe());
  return callbacks_.add(key, delta);
}

// ---- FileStore ----------------------------------------------------------------------------------
// Every file is reached through dir_fd_, never through a path (Note [private directory] in
// private_files.hpp).

FileStore::FileStore(std::string directory) : dir_(std::move(directory)) {
  SF_CHECK(!dir_.empty(), "FileStore: empty directory");
  dir_fd_ = store_detail::open_private_directory(dir_, "FileStore");
}

FileStore::~FileStore() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

std::string FileStore::describe() const {
  return "file store " + dir_;
}

std::string FileStore::name_of(const std::string& key) const {
  check_key(key, describe());
  // Keys become file names: letters, digits, '.', '-' and '_' stay, every other byte is %XX.
  std::string name = "k_";
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '.' || c == '-' || c == '_')
      name += char(c);
    else
      name += fmt::format("%{:02X}", unsigned(c));
  }
  return name;
}

std::optional<std::string> FileStore::read(const std::string& key) const {
  std::string name = name_of(key);
  int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    system_error("FileStore: cannot open", dir_ + "/" + name);
  }
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      system_error("FileStore: cannot read", dir_ + "/" + name);
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

void FileStore::set(const std::string& key, const std::string& value) {
  static std::atomic<uint64_t> counter{0};
  std::string name = name_of(key);
  // O_EXCL: a name left by an earlier process (or planted) is skipped, never written through.
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 64 && fd < 0; ++attempt) {
    tmp = fmt::format(".tmp.{}.{}", ::getpid(), counter++);
    fd = ::openat(dir_fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) system_error("FileStore: cannot create", dir_ + "/" + tmp);
  size_t done = 0;
  while (done < value.size()) {
    ssize_t n = ::write(fd, value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlinkat(dir_fd_, tmp.c_str(), 0);
      errno = err;
      system_error("FileStore: cannot write", dir_ + "/" + tmp);
    }
    done += size_t(n);
  }
  ::close(fd);
  // rename is atomic: a reader sees the old file, the new one or none, never half of one.
  if (::renameat(dir_fd_, tmp.c_str(), dir_fd_, name.c_str()) != 0) {
    int err = errno;
    ::unlinkat(dir_fd_, tmp.c_str(), 0);
    errno = err;
    system_error("FileStore: cannot rename into", dir_ + "/" + name);
  }
}

std::optional<std::string> FileStore::get(const std::string& key, Millis timeout) {
  std::optional<std::string> v;
  poll_until(timeout, [&] { return bool(v = read(key)); });
  return v;
}

bool FileStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  size_t next = 0;
  return poll_until(timeout, [&] {
    struct stat st {};
    while (next < keys.size() &&
           ::fstatat(dir_fd_, name_of(keys[next]).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
      ++next;
    return next == keys.size();
  });
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  std::string lock_name = name_of(key) + ".lock";
  // Shared by every process that adds to the key, so no O_EXCL; never through a link.
  int fd = ::openat(dir_fd_, lock_name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) system_error("FileStore: cannot open lock", dir_ + "/" + lock_name);
  // flock, not O_EXCL: the kernel drops the lock of a holder that died (SIGKILL).
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    int err = errno;
    ::close(fd);
    errno = err;
    system_error("FileStore: cannot lock", dir_ + "/" + lock_name);
  }
  int64_t value = 0;
  try {
    std::optional<std::string> old = read(key);
    value = (old ? parse_counter(*old, key, describe()) : 0) + delta;
    set(key, fmt::format("{}", value));
  } catch (...) {
    ::close(fd);  // releases the lock
    throw;
  }
  ::close(fd);
  return value;
}

// ---- open_store ---------------------------------------------------------------------------------

std::shared_ptr<KeyValueStore> open_store(std::string_view spec, int rank,
                                          KeyValueStore::Millis connect_timeout,
                                          const std::string& job) {
  if (spec.substr(0, 5) == "file:" && spec.size() > 5)
    return std::make_shared<FileStore>(std::string(spec.substr(5)));
  if (spec.substr(0, 4) == "tcp:") {
    std::string_view rest = spec.substr(4);
    size_t colon = rest.rfind(':');
    if (colon != std::string_view::npos && colon > 0) {
      std::string port_text(rest.substr(colon + 1));
      char* end = nullptr;
      long port = std::strtol(port_text.c_str(), &end, 10);
      std::string host(rest.substr(0, colon));
      if (host.size() > 2 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);  // an IPv6 address as URLs write it: [::1]
      if (!port_text.empty() && *end == '\0' && port > 0 && port < 65536 && host != "[]")
        return std::make_shared<TcpStore>(host, int(port), rank == 0, connect_timeout,
                                          std::string(), job);
    }
  }
  invalid_usage("store '{}': expected file:<directory> or tcp:<host>:<port> (port 1-65535)",
                spec);
}

}  // namespace symmflow
