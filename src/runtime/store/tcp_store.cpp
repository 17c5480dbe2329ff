// TcpStore (contract in store.hpp): one process serves the keys from a thread of its own
// (tcp_server.hpp); every process, the server's included, talks to it over one authenticated
// connection, one request at a time. Protocol, handshake and secret: tcp_protocol.hpp.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "symmflow/core/error.hpp"
#include "symmflow/runtime/store.hpp"
#include "tcp_protocol.hpp"
#include "tcp_server.hpp"

namespace symmflow {

using store_detail::Fields;

namespace {

// A connected socket to host:port, or -1 (`last` says why).
int connect_once(const std::string& host, int port, const std::string& who, std::string& last) {
  addrinfo* res = store_detail::resolve_address(host, port, false, who);
  int fd = -1;
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
  return fd;
}

}  // namespace

struct TcpStore::Impl {
  std::string host;
  int port = 0;
  std::string secret;
  std::string job;  // the world's prefix (Note [tcp store authentication])
  std::unique_ptr<store_detail::TcpServer> server;
  int fd = -1;
  std::mutex mutex;  // one request at a time on the connection

  std::string who() const {
    const bool v6 = host.find(':') != std::string::npos;  // [::1]:29500, as it may be written
    return fmt::format("tcp store {}{}{}:{}", v6 ? "[" : "", host, v6 ? "]" : "", port);
  }

  // Connects and authenticates (Note [tcp store authentication]), retrying until `timeout`
  // while the server is not up yet or drops the connection before the handshake ends.
  void connect(Millis timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string last = "no address";
    for (;;) {
      int s = connect_once(host, port, who(), last);
      if (s >= 0) {
        int one = 1;
        ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        // A server that stops answering (stopped, not dead) still ends a request: no hang.
        timeval tv{};
        tv.tv_sec = std::max<long>(10, long(timeout.count() / 1000));
        ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ::setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        try {
          last = store_detail::client_handshake(s, secret, port, job, who());
        } catch (...) {
          ::close(s);
          throw;
        }
        if (last.empty()) {
          fd = s;
          return;
        }
        ::close(s);
      }
      if (std::chrono::steady_clock::now() >= deadline)
        throw_error(ErrorCode::Timeout, "{}: cannot connect within {} s: {}", who(),
                    double(timeout.count()) / 1000.0, last);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  [[noreturn]] void lost(const char* what) {
    throw_error(ErrorCode::System, "{}: connection lost ({}: {}); is the serving process alive?",
                who(), what, errno ? std::strerror(errno) : "closed by the server");
  }

  Fields request(const Fields& req) {
    std::lock_guard lock(mutex);
    SF_CHECK(fd >= 0, "{}: not connected", who());
    std::string msg = store_detail::encode(req);
    SF_CHECK(msg.size() - 4 <= store_detail::kMaxMessage,
             "{}: a request of {} bytes is over the store's limit of {} bytes", who(),
             msg.size() - 4, store_detail::kMaxMessage);
    if (!store_detail::send_all(fd, msg)) lost("send");
    Fields reply;
    if (!store_detail::recv_message(fd, store_detail::kMaxMessage, reply)) lost("recv");
    if (reply.empty()) lost("malformed reply");
    if (reply[0] == "error")
      throw_error(ErrorCode::System, "{}: the server refused a request: {}", who(),
                  reply.size() > 1 ? reply[1] : "");
    return reply;
  }
};

TcpStore::TcpStore(std::string host, int port, bool serve, Millis connect_timeout,
                   std::string secret, std::string job)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = std::move(host);
  impl_->port = port;
  impl_->job = std::move(job);
  impl_->secret = secret.empty() ? store_detail::resolve_store_secret(impl_->who())
                                 : std::move(secret);
  SF_CHECK(impl_->secret.size() >= store_detail::kMinSecretBytes,
           "{}: the store secret has {} characters; use at least {}", impl_->who(),
           impl_->secret.size(), store_detail::kMinSecretBytes);
  if (serve) {
    store_detail::ServerLimits limits;
    limits.io_timeout = std::max(connect_timeout, Millis(1000));
    impl_->server = std::make_unique<store_detail::TcpServer>(
        impl_->host, port, impl_->secret, impl_->job, limits, impl_->who());
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
