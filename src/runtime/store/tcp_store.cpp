// TcpStore (contract in store.hpp): one process serves the keys from a thread of its own; every
// process, the server's included, talks to it over one connection, one request at a time.
//
// Note [tcp store protocol]: a message is a u32 byte count followed by that many bytes: a u32
// field count, then per field a u32 length and the bytes (native byte order: a store joins
// processes of one build on hosts of one architecture). Requests and replies:
//   set k v      -> ok              get k -> 1 v | 0
//   check k...   -> 1 | 0          add k d -> value (decimal)
// The server never blocks on a key: get / wait poll with `get` / `check` (50 µs doubling to
// 5 ms), so a client that goes away mid-wait costs the server nothing, and every wait is bounded
// by the caller's timeout. A message over kMaxMessage bytes closes the connection.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "symmflow/core/error.hpp"
#include "symmflow/runtime/store.hpp"

namespace symmflow {

namespace {

constexpr uint32_t kMaxMessage = 64u << 20;

using Fields = std::vector<std::string>;

std::string encode(const Fields& fields) {
  std::string body;
  auto put = [&](uint32_t v) { body.append(reinterpret_cast<const char*>(&v), 4); };
  put(uint32_t(fields.size()));
  for (const std::string& f : fields) {
    put(uint32_t(f.size()));
    body += f;
  }
  std::string out;
  uint32_t n = uint32_t(body.size());
  out.append(reinterpret_cast<const char*>(&n), 4);
  return out + body;
}

// Decodes a message body; false when malformed.
bool decode(const char* p, size_t n, Fields& out) {
  auto get = [&](uint32_t& v) {
    if (n < 4) return false;
    std::memcpy(&v, p, 4);
    p += 4;
    n -= 4;
    return true;
  };
  uint32_t count = 0;
  if (!get(count)) return false;
  out.clear();
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t len = 0;
    if (!get(len) || len > n) return false;
    out.emplace_back(p, len);
    p += len;
    n -= len;
  }
  return n == 0;
}

addrinfo* resolve(const std::string& host, int port, bool passive, const std::string& who) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  std::string port_text = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &res);
  if (rc != 0)
    throw_error(ErrorCode::System, "{}: cannot resolve '{}': {}", who, host, gai_strerror(rc));
  return res;
}

class Server {
 public:
  Server(const std::string& host, int port, const std::string& who) {
    addrinfo* res = resolve(host, port, true, who);
    for (addrinfo* a = res; a && listen_fd_ < 0; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0)
        listen_fd_ = fd;
      else
        ::close(fd);
    }
    int err = errno;
    ::freeaddrinfo(res);
    if (listen_fd_ < 0)
      throw_error(ErrorCode::System, "{}: cannot listen on {}:{}: {}", who, host, port,
                  std::strerror(err));
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (::pipe2(wake_, O_CLOEXEC) != 0) {
      ::close(listen_fd_);
      throw_error(ErrorCode::System, "{}: pipe: {}", who, std::strerror(errno));
    }
    thread_ = std::thread([this] { serve(); });
  }
  ~Server() {
    char c = 0;
    (void)!::write(wake_[1], &c, 1);
    thread_.join();
    for (auto& [fd, buf] : clients_) ::close(fd);
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  int port() const { return port_; }

 private:
  void serve() {
    for (;;) {
      std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (auto& [fd, buf] : clients_) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          clients_[fd];
        }
      }
      for (size_t i = 2; i < fds.size(); ++i)
        if (fds[i].revents) serve_client(fds[i].fd);
    }
  }

  void serve_client(int fd) {
    std::string& buf = clients_[fd];
    char chunk[65536];
    ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) {
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
      ::close(fd);
      clients_.erase(fd);
      return;
    }
    buf.append(chunk, size_t(n));
    while (buf.size() >= 4) {
      uint32_t len = 0;
      std::memcpy(&len, buf.data(), 4);
      Fields req;
      bool whole = buf.size() >= 4 + size_t(len);
      if (len > kMaxMessage || (whole && !decode(buf.data() + 4, len, req))) {
        ::close(fd);
        clients_.erase(fd);
        return;
      }
      if (!whole) return;
      buf.erase(0, 4 + size_t(len));
      std::string reply = encode(answer(req));
      size_t done = 0;
      while (done < reply.size()) {
        ssize_t w = ::send(fd, reply.data() + done, reply.size() - done, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          ::close(fd);
          clients_.erase(fd);
          return;
        }
        done += size_t(w);
      }
    }
  }

  Fields answer(const Fields& req) {
    if (req.size() == 3 && req[0] == "set") {
      keys_[req[1]] = req[2];
      return {"ok"};
    }
    if (req.size() == 2 && req[0] == "get") {
      auto it = keys_.find(req[1]);
      return it == keys_.end() ? Fields{"0"} : Fields{"1", it->second};
    }
    if (!req.empty() && req[0] == "check") {
      for (size_t i = 1; i < req.size(); ++i)
        if (!keys_.count(req[i])) return {"0"};
      return {"1"};
    }
    if (req.size() == 3 && req[0] == "add") {
      std::string& v = keys_[req[1]];
      long long value = (v.empty() ? 0 : std::strtoll(v.c_str(), nullptr, 10)) +
                        std::strtoll(req[2].c_str(), nullptr, 10);
      v = std::to_string(value);
      return {v};
    }
    return {"error", "bad request"};
  }

  int listen_fd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::map<int, std::string> clients_;  // fd -> bytes received, not yet a whole message
  std::map<std::string, std::string> keys_;
  std::thread thread_;
};

}  // namespace

struct TcpStore::Impl {
  std::string host;
  int port = 0;
  std::unique_ptr<Server> server;
  int fd = -1;
  std::mutex mutex;  // one request at a time on the connection

  std::string who() const { return fmt::format("tcp store {}:{}", host, port); }

  void connect(Millis timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string last = "no address";
    for (;;) {
      addrinfo* res = resolve(host, port, false, who());
      for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
        int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (s < 0) continue;
        if (::connect(s, a->ai_addr, a->ai_addrlen) == 0) {
          fd = s;
        } else {
          last = std::strerror(errno);
          ::close(s);
        }
      }
      ::freeaddrinfo(res);
      if (fd >= 0) break;
      if (std::chrono::steady_clock::now() >= deadline)
        throw_error(ErrorCode::Timeout, "{}: cannot connect within {} s: {}", who(),
                    double(timeout.count()) / 1000.0, last);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // A server that stops answering (stopped, not dead) still ends a request: no hang.
    timeval tv{};
    tv.tv_sec = std::max<long>(10, long(timeout.count() / 1000));
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }

  [[noreturn]] void lost(const char* what) {
    throw_error(ErrorCode::System, "{}: connection lost ({}: {}); is the serving process alive?",
                who(), what, errno ? std::strerror(errno) : "closed by the server");
  }

  Fields request(const Fields& req) {
    std::lock_guard lock(mutex);
    SF_CHECK(fd >= 0, "{}: not connected", who());
    std::string msg = encode(req);
    size_t done = 0;
    while (done < msg.size()) {
      errno = 0;
      ssize_t n = ::send(fd, msg.data() + done, msg.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) lost("send");
      done += size_t(n);
    }
    auto recv_all = [&](char* p, size_t n) {
      while (n) {
        errno = 0;
        ssize_t r = ::recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) lost("recv");
        p += r;
        n -= size_t(r);
      }
    };
    uint32_t len = 0;
    recv_all(reinterpret_cast<char*>(&len), 4);
    if (len > kMaxMessage) lost("reply too large");
    std::string body(len, '\0');
    recv_all(body.data(), len);
    Fields reply;
    if (!decode(body.data(), body.size(), reply) || reply.empty()) lost("malformed reply");
    if (reply[0] == "error")
      throw_error(ErrorCode::System, "{}: the server refused a request: {}", who(),
                  reply.size() > 1 ? reply[1] : "");
    return reply;
  }
};

TcpStore::TcpStore(std::string host, int port, bool serve, Millis connect_timeout)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = std::move(host);
  impl_->port = port;
  if (serve) {
    impl_->server = std::make_unique<Server>(impl_->host, port, impl_->who());
    impl_->port = impl_->server->port();
  }
  impl_->connect(connect_timeout);
}

TcpStore::~TcpStore() {
  if (impl_->fd >= 0) ::close(impl_->fd);
}

bool TcpStore::serving() const {
  return impl_->server != nullptr;
}
int TcpStore::port() const {
  return impl_->port;
}
std::string TcpStore::describe() const {
  return impl_->who();
}

void TcpStore::set(const std::string& key, const std::string& value) {
  SF_CHECK(!key.empty(), "{}: empty key", describe());
  impl_->request({"set", key, value});
}

std::optional<std::string> TcpStore::get(const std::string& key, Millis timeout) {
  SF_CHECK(!key.empty(), "{}: empty key", describe());
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto nap = std::chrono::microseconds(50);
  for (;;) {
    Fields r = impl_->request({"get", key});
    if (r[0] == "1" && r.size() == 2) return r[1];
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(5000));
  }
}

bool TcpStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  Fields req = {"check"};
  for (const std::string& k : keys) {
    SF_CHECK(!k.empty(), "{}: empty key", describe());
    req.push_back(k);
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto nap = std::chrono::microseconds(50);
  for (;;) {
    if (impl_->request(req)[0] == "1") return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(5000));
  }
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  SF_CHECK(!key.empty(), "{}: empty key", describe());
  return std::strtoll(impl_->request({"add", key, std::to_string(delta)})[0].c_str(), nullptr, 10);
}

}  // namespace symmflow
