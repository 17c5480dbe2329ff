// Directories and files only this user may have written: Note [private directory] in
// private_files.hpp.
#include "private_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "symmflow/core/error.hpp"

namespace symmflow::store_detail {

namespace {

[[noreturn]] void refuse(std::string_view who, const std::string& path, const std::string& why) {
  throw_error(ErrorCode::System, "{}: refusing {}: {}", who, path, why);
}

std::string mode_text(mode_t mode) {
  return fmt::format("mode {:04o}", unsigned(mode & 07777));
}

}  // namespace

int open_private_directory(const std::string& path, std::string_view who) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
    throw_error(ErrorCode::System, "{}: cannot create directory {}: {}", who, path,
                std::strerror(errno));
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    struct stat link {};
    if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode))
      refuse(who, path,
             "it is a symbolic link (use the real directory; a link in a shared directory such as "
             "/tmp can be planted by another user)");
    if (err == ENOTDIR) throw_error(ErrorCode::System, "{}: {} is not a directory", who, path);
    throw_error(ErrorCode::System, "{}: cannot open directory {}: {}", who, path,
                std::strerror(err));
  }
  struct stat st {};
  std::string why;
  if (::fstat(fd, &st) != 0)
    why = std::string("fstat: ") + std::strerror(errno);
  else if (st.st_uid != ::geteuid())
    why = fmt::format(
        "it belongs to uid {}, not to this process's user (uid {}): its owner could read or "
        "plant keys; use a fresh directory of your own (mktemp -d)",
        st.st_uid, ::geteuid());
  else if (st.st_mode & 022)
    why = fmt::format(
        "group or others can write to it ({}): they could read or plant keys; use a directory "
        "only you can write (mktemp -d, or chmod go-w)",
        mode_text(st.st_mode));
  if (!why.empty()) {
    ::close(fd);
    refuse(who, path, why);
  }
  return fd;
}

std::string read_private_file(int dir_fd, const std::string& name, const std::string& shown,
                              std::string_view who) {
  int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) refuse(who, shown, "it is a symbolic link");
    throw_error(ErrorCode::System, "{}: cannot open {}: {}", who, shown, std::strerror(errno));
  }
  struct stat st {};
  std::string why;
  if (::fstat(fd, &st) != 0)
    why = std::string("fstat: ") + std::strerror(errno);
  else if (!S_ISREG(st.st_mode))
    why = "it is not a regular file";
  else if (st.st_uid != ::geteuid())
    why = fmt::format("it belongs to uid {}, not to this process's user (uid {})", st.st_uid,
                      ::geteuid());
  else if (st.st_mode & 077)
    why = fmt::format("group or others can read or write it ({}); chmod 600 it",
                      mode_text(st.st_mode));
  std::string out;
  char buf[4096];
  while (why.empty()) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) why = std::string("read: ") + std::strerror(errno);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  if (!why.empty()) refuse(who, shown, why);
  return out;
}

}  // namespace symmflow::store_detail
