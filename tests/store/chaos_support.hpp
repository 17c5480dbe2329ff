// Helpers of the chaos tests (chaos_*_test.cpp): an attacker's raw TCP connection that speaks the
// store's framing (Note [tcp store protocol] in src/runtime/store/tcp_protocol.hpp) by hand, a
// fake store server, scoped environment variables and descriptor limits, and threads-as-ranks.
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/store/tcp_protocol.hpp"
#include "symmflow/runtime/store.hpp"

namespace symmflow::testing {

using Fields = std::vector<std::string>;

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

// A message as the store frames it (the store's own encoder: u32 length, u32 field count, per
// field u32 length + bytes).
inline std::string frame(const Fields& fields) { return store_detail::encode(fields); }

inline std::optional<Fields> unframe(std::string& bytes) {
  uint32_t n = 0, count = 0;
  if (bytes.size() < 8) return std::nullopt;
  std::memcpy(&n, bytes.data(), 4);
  if (bytes.size() < 4 + size_t(n)) return std::nullopt;
  std::memcpy(&count, bytes.data() + 4, 4);
  Fields out;
  size_t at = 8;
  for (uint32_t i = 0; i < count && at + 4 <= 4 + size_t(n); ++i) {
    uint32_t len = 0;
    std::memcpy(&len, bytes.data() + at, 4);
    out.push_back(bytes.substr(at + 4, len));
    at += 4 + len;
  }
  bytes.erase(0, 4 + size_t(n));
  return out;
}

inline bool connect_loopback(int fd, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

// An attacker's connection to a store: bytes in and out, every call bounded.
class RawConnection {
 public:
  explicit RawConnection(int port)
      : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)), port_(port) {
    timeval tv{2, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    connect_loopback(fd_, port);
  }
  ~RawConnection() { ::close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // False when the server closed or reset the connection (or 2 s passed).
  bool send_bytes(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += size_t(n);
    }
    return true;
  }
  // What the server sends within `bound`, and whether it closed the connection by then.
  std::pair<std::string, bool> drain(std::chrono::milliseconds bound) {
    auto deadline = std::chrono::steady_clock::now() + bound;
    std::string got;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0) return {got, false};
      char buf[65536];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return {got, true};
      got.append(buf, size_t(n));
    }
  }
  // The next whole message within `bound`.
  std::optional<Fields> read_message(std::chrono::milliseconds bound) {
    auto deadline = std::chrono::steady_clock::now() + bound;
    for (;;) {
      if (std::optional<Fields> m = unframe(pending_)) return m;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0) return std::nullopt;
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return std::nullopt;
      pending_.append(buf, size_t(n));
    }
  }
  int fd() const { return fd_; }
  int port() const { return port_; }

 private:
  int fd_;
  int port_;
  std::string pending_;
};

// Does the handshake with the job's secret (SYMMFLOW_STORE_SECRET, as the tests' main sets it),
// for the port dialed and `job` (Note [tcp store authentication]).
inline bool authenticate(RawConnection& c, const std::string& job = "") {
  std::optional<Fields> hello = c.read_message(std::chrono::milliseconds(2000));
  if (!hello || hello->size() != 2) return false;
  std::string secret = std::getenv("SYMMFLOW_STORE_SECRET");
  std::string nonce = "00112233445566778899aabbccddeeff";
  c.send_bytes(frame({"auth", nonce,
                      store_detail::handshake_proof(secret, "client", (*hello)[1], nonce,
                                                    c.port(), job),
                      std::to_string(c.port()), job}));
  std::optional<Fields> reply = c.read_message(std::chrono::milliseconds(2000));
  return reply && !reply->empty() && (*reply)[0] == "ok";
}

// A listening socket on a free loopback port whose thread serves the one connection it accepts
// with `serve` (which closes it); destroying it stops a thread still waiting to accept.
class OneConnectionServer {
 public:
  explicit OneConnectionServer(std::function<void(int)> serve)
      : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 8);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, serve = std::move(serve)] {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c >= 0) serve(c);
    });
  }
  ~OneConnectionServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  OneConnectionServer(const OneConnectionServer&) = delete;
  OneConnectionServer& operator=(const OneConnectionServer&) = delete;
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
  std::thread thread_;
};

// A server on a free loopback port that greets as a store would and answers any handshake with
// "ok" and a proof it cannot have made (it lacks the secret), then closes.
class FakeServer : public OneConnectionServer {
 public:
  FakeServer()
      : OneConnectionServer([](int c) {
          std::string hello =
              frame({store_detail::kServerHello, "0123456789abcdef0123456789abcdef"});
          (void)!::send(c, hello.data(), hello.size(), MSG_NOSIGNAL);
          char buf[4096];
          (void)!::recv(c, buf, sizeof buf, 0);
          std::string ok = frame({"ok", std::string(64, '0')});
          (void)!::send(c, ok.data(), ok.size(), MSG_NOSIGNAL);
          (void)!::recv(c, buf, sizeof buf, 0);
          ::close(c);
        }) {}
};

// A process that squatted a port (its own, on loopback) and relays the one connection it accepts
// to `target`, byte for byte both ways, until either side closes (issue 39 item 8).
class Relay : public OneConnectionServer {
 public:
  explicit Relay(int target)
      : OneConnectionServer([target](int in) {
          int out = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
          connect_loopback(out, target);
          pollfd p[2] = {{in, POLLIN, 0}, {out, POLLIN, 0}};
          char buf[4096];
          for (bool open = true; open && ::poll(p, 2, 5000) > 0;) {
            for (int i = 0; i < 2 && open; ++i) {
              if (!p[i].revents) continue;
              ssize_t n = ::recv(p[i].fd, buf, sizeof buf, 0);
              open = n > 0 && ::send(p[1 - i].fd, buf, size_t(n), MSG_NOSIGNAL) == n;
            }
          }
          ::close(out);
          ::close(in);
        }) {}
};

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Lowers this process's descriptor limit to `extra` past the highest descriptor open now.
class ScopedFdLimit {
 public:
  explicit ScopedFdLimit(int extra) {
    ::getrlimit(RLIMIT_NOFILE, &old_);
    int highest = 0;
    for (int fd : open_descriptors()) highest = std::max(highest, fd);
    rlimit lower = old_;
    lower.rlim_cur = rlim_t(highest + 1 + extra);
    ::setrlimit(RLIMIT_NOFILE, &lower);
  }
  ~ScopedFdLimit() { ::setrlimit(RLIMIT_NOFILE, &old_); }
  static std::vector<int> open_descriptors() {
    std::vector<int> out;
    if (DIR* d = ::opendir("/proc/self/fd")) {
      while (dirent* e = ::readdir(d))
        if (e->d_name[0] != '.') out.push_back(std::atoi(e->d_name));
      ::closedir(d);
    }
    return out;
  }

 private:
  rlimit old_{};
};

// How many of this process's descriptors are sockets.
inline int open_sockets() {
  int n = 0;
  for (int fd : ScopedFdLimit::open_descriptors()) {
    char target[64] = {};
    std::string link = "/proc/self/fd/" + std::to_string(fd);
    if (::readlink(link.c_str(), target, sizeof target - 1) > 0 &&
        std::strncmp(target, "socket:", 7) == 0)
      ++n;
  }
  return n;
}

inline double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Runs fn(rank) on `world` threads; returns each one's error text ("" when none).
inline std::vector<std::string> on_threads(int world, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

inline StoreOptions store_options(std::shared_ptr<KeyValueStore> store, int rank, int world,
                                  double timeout_s) {
  StoreOptions o;
  o.store = std::move(store);
  o.rank = rank;
  o.world_size = world;
  o.prefix = "w";
  o.timeout_s = timeout_s;
  return o;
}

}  // namespace symmflow::testing
