// Where the TCP store's secret comes from: Note [store secret] in tcp_protocol.hpp.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "private_files.hpp"
#include "symmflow/core/error.hpp"
#include "tcp_protocol.hpp"

namespace symmflow::store_detail {

namespace {

constexpr const char* kSecretName = "store_secret";

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string checked(std::string secret, const std::string& from, const std::string& who) {
  if (secret.size() < kMinSecretBytes)
    invalid_usage("{}: the store secret from {} has {} characters; use at least {} (for example "
                  "`head -c 32 /dev/urandom | base64`)",
                  who, from, secret.size(), kMinSecretBytes);
  return secret;
}

// $XDG_CONFIG_HOME/symmflow, else $HOME/.config/symmflow; "" when neither variable is set.
std::string default_directory() {
  std::string base = env("XDG_CONFIG_HOME");
  if (base.empty()) {
    std::string home = env("HOME");
    if (home.empty()) return "";
    base = home + "/.config";
    if (::mkdir(base.c_str(), 0700) != 0 && errno != EEXIST) return "";
  }
  return base + "/symmflow";
}

// Creates the per-user secret unless it exists: written to a temporary file of this process,
// then linked to its name (link fails if another process linked first; either way one secret).
void create_secret(int dir_fd, const std::string& dir, const std::string& who) {
  std::string tmp = fmt::format(".{}.{}.{}", kSecretName, ::getpid(), random_hex(4));
  int fd = ::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    0600);
  if (fd < 0)
    throw_error(ErrorCode::System, "{}: cannot create {}/{}: {}", who, dir, tmp,
                std::strerror(errno));
  std::string text = random_hex(32) + "\n";
  bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  int err = errno;
  ::close(fd);
  if (written && ::linkat(dir_fd, tmp.c_str(), dir_fd, kSecretName, 0) != 0 && errno != EEXIST) {
    written = false;
    err = errno;
  }
  ::unlinkat(dir_fd, tmp.c_str(), 0);
  if (!written)
    throw_error(ErrorCode::System, "{}: cannot write the store secret {}/{}: {}", who, dir,
                kSecretName, std::strerror(err));
}

}  // namespace

std::string resolve_store_secret(const std::string& who) {
  if (std::string value = env("SYMMFLOW_STORE_SECRET"); !value.empty())
    return checked(value, "SYMMFLOW_STORE_SECRET", who);
  if (std::string path = env("SYMMFLOW_STORE_SECRET_FILE"); !path.empty()) {
    std::string shown = "SYMMFLOW_STORE_SECRET_FILE " + path;
    return checked(trimmed(read_private_file(AT_FDCWD, path, shown, who)), path, who);
  }
  std::string dir = default_directory();
  if (dir.empty())
    invalid_usage("{}: no store secret: set SYMMFLOW_STORE_SECRET (the same value of at least {} "
                  "characters on every rank) or SYMMFLOW_STORE_SECRET_FILE, or HOME so that one "
                  "is kept in ~/.config/symmflow/{}",
                  who, kMinSecretBytes, kSecretName);
  int dir_fd = -1;
  try {
    dir_fd = open_private_directory(dir, who);
    struct stat st {};
    if (::fstatat(dir_fd, kSecretName, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT)
      create_secret(dir_fd, dir, who);
    std::string path = dir + "/" + kSecretName;
    std::string secret = checked(trimmed(read_private_file(dir_fd, kSecretName, path, who)), path,
                                 who);
    ::close(dir_fd);
    return secret;
  } catch (const Error& e) {
    if (dir_fd >= 0) ::close(dir_fd);
    invalid_usage("{} (no SYMMFLOW_STORE_SECRET or SYMMFLOW_STORE_SECRET_FILE was set, so the "
                  "per-user secret in {} was tried)",
                  e.what(), dir);
  }
}

}  // namespace symmflow::store_detail
