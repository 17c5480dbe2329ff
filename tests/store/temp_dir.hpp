// A fresh directory under $TMPDIR (or /tmp) for one test, removed with everything in it when the
// test ends; and a free loopback TCP port.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace symmflow::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/symmflow-store-XXXXXX";
    path_ = ::mkdtemp(pattern.data()) ? pattern : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A port that was free a moment ago (bound to 127.0.0.1:0, then released).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// SYMMFLOW_STORE for a world of child processes: a file store in `dir`, or a TCP store on a free
// port ("file" or "tcp").
inline std::string store_spec(const std::string& kind, const TempDir& dir) {
  if (kind == "file") return "file:" + dir.path() + "/store";
  return "tcp:127.0.0.1:" + std::to_string(free_port());
}

}  // namespace symmflow::testing
