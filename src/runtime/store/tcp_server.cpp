// The TCP store's server: Note [tcp store server] in tcp_server.hpp, the protocol and handshake in
// tcp_protocol.hpp.
#include "tcp_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "sha256.hpp"
#include "symmflow/core/error.hpp"

namespace symmflow::store_detail {

namespace {

constexpr auto kAcceptPause = std::chrono::milliseconds(100);
constexpr int kAcceptsPerWake = 64;

int bind_and_listen(const std::string& host, int port, const std::string& who) {
  addrinfo* res = resolve_address(host, port, true, who);
  int listen_fd = -1;
  int err = 0;
  for (addrinfo* a = res; a && listen_fd < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd = fd;
    } else {
      err = errno;
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  if (listen_fd < 0)
    throw_error(ErrorCode::System, "{}: cannot listen on {}:{}: {}", who, host, port,
                std::strerror(err));
  return listen_fd;
}

}  // namespace

TcpServer::TcpServer(const std::string& host, int port, std::string secret, std::string job,
                     ServerLimits limits, const std::string& who)
    : secret_(std::move(secret)), job_(std::move(job)), limits_(limits) {
  listen_fd_ = bind_and_listen(host, port, who);
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (::pipe2(wake_, O_CLOEXEC) != 0) {
    int err = errno;
    ::close(listen_fd_);
    if (spare_fd_ >= 0) ::close(spare_fd_);
    throw_error(ErrorCode::System, "{}: pipe: {}", who, std::strerror(err));
  }
  thread_ = std::thread([this] { serve(); });
}

TcpServer::~TcpServer() {
  char c = 0;
  (void)!::write(wake_[1], &c, 1);
  thread_.join();
  for (auto& [fd, conn] : conns_) ::close(fd);
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
  if (spare_fd_ >= 0) ::close(spare_fd_);
}

void TcpServer::serve() {
  std::vector<pollfd> fds;
  for (;;) {
    Clock::time_point now = Clock::now();
    bool listening = now >= accept_paused_until_;
    Clock::time_point next = listening ? Clock::time_point::max() : accept_paused_until_;
    fds.assign({{wake_[0], POLLIN, 0}, {listen_fd_, short(listening ? POLLIN : 0), 0}});
    for (auto& [fd, c] : conns_) {
      fds.push_back({fd, short(c.out_done < c.out.size() ? POLLOUT : POLLIN), 0});
      next = std::min(next, c.deadline);
    }
    int timeout_ms = -1;
    if (next != Clock::time_point::max())
      timeout_ms = int(std::clamp<int64_t>(
          std::chrono::ceil<std::chrono::milliseconds>(next - now).count(), 0, 60000));
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents) return;
    now = Clock::now();
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      auto it = conns_.find(fds[i].fd);
      if (it == conns_.end()) continue;
      bool keep = (fds[i].revents & POLLOUT) ? on_writable(it->first, it->second, now)
                                             : on_readable(it->first, it->second, now);
      if (!keep) close_conn(fds[i].fd);
    }
    std::vector<int> expired;  // no progress within io_timeout
    for (const auto& [fd, c] : conns_)
      if (c.deadline <= now) expired.push_back(fd);
    for (int fd : expired) close_conn(fd);
    if (fds[1].revents & POLLIN) accept_ready(now);
  }
}

void TcpServer::accept_ready(Clock::time_point now) {
  for (int i = 0; i < kAcceptsPerWake; ++i) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      admit(fd, now);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    if (errno == EMFILE || errno == ENFILE) {
      shed_one();
      if (spare_fd_ >= 0) continue;
    }
    accept_paused_until_ = now + kAcceptPause;  // Note [tcp store server]: never a busy loop
    return;
  }
}

void TcpServer::shed_one() {
  if (spare_fd_ < 0) return;
  ::close(spare_fd_);
  int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) ::close(fd);
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

size_t TcpServer::pending() const {
  size_t n = 0;
  for (const auto& [fd, c] : conns_) n += !c.authed;
  return n;
}

void TcpServer::admit(int fd, Clock::time_point now) {
  if (conns_.size() >= limits_.max_clients) {
    ::close(fd);
    return;
  }
  if (pending() >= limits_.max_pending) {
    auto oldest = conns_.end();
    for (auto it = conns_.begin(); it != conns_.end(); ++it)
      if (!it->second.authed &&
          (oldest == conns_.end() || it->second.serial < oldest->second.serial))
        oldest = it;
    if (oldest != conns_.end()) close_conn(oldest->first);
  }
  Conn c;
  try {
    c.nonce = random_hex(16);
  } catch (const Error&) {
    ::close(fd);
    return;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  c.serial = next_serial_++;
  c.out = encode({kServerHello, c.nonce});
  c.deadline = now + limits_.io_timeout;  // to authenticate
  conns_[fd] = std::move(c);
  if (!on_writable(fd, conns_[fd], now)) close_conn(fd);
}

bool TcpServer::on_readable(int fd, Conn& c, Clock::time_point now) {
  char chunk[65536];
  ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
  if (n == 0) return false;
  if (n < 0) return errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK;
  c.in.append(chunk, size_t(n));
  if (c.authed) c.deadline = now + limits_.io_timeout;  // progress
  return handle_messages(fd, c, now);
}

// Sends what it can of the pending reply: 1 all sent, 0 the socket is full (poll for POLLOUT),
// -1 the connection failed or is to be closed.
int TcpServer::flush(int fd, Conn& c, Clock::time_point now) {
  size_t before = c.out_done;
  while (c.out_done < c.out.size()) {
    ssize_t n = ::send(fd, c.out.data() + c.out_done, c.out.size() - c.out_done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (c.authed && c.out_done > before) c.deadline = now + limits_.io_timeout;  // progress
      return 0;
    }
    if (n <= 0) return -1;
    c.out_done += size_t(n);
  }
  c.out.clear();
  c.out_done = 0;
  return c.closing ? -1 : 1;
}

// Once the pending reply is gone, requests already received are answered.
bool TcpServer::on_writable(int fd, Conn& c, Clock::time_point now) {
  int sent = flush(fd, c, now);
  return sent == 0 || (sent == 1 && handle_messages(fd, c, now));
}

// Answers whole requests in order, one reply at a time: nothing more is read from a client
// while its reply waits (the poll asks for POLLOUT only).
bool TcpServer::handle_messages(int fd, Conn& c, Clock::time_point now) {
  while (c.out.empty() && c.in.size() >= 4) {
    uint32_t len = 0;
    std::memcpy(&len, c.in.data(), 4);
    if (len > (c.authed ? limits_.max_message : kMaxHandshakeMessage)) return false;
    if (c.in.size() < 4 + size_t(len)) break;
    Fields req;
    if (!decode(c.in.data() + 4, len, req)) return false;
    c.in.erase(0, 4 + size_t(len));
    if (c.authed)
      c.out = encode(answer(req));
    else
      handshake(c, req);
    if (c.authed) c.deadline = now + limits_.io_timeout;
    int sent = flush(fd, c, now);
    if (sent <= 0) return sent == 0;
  }
  // Idle (nothing half received, nothing to send): no deadline until the next request.
  if (c.authed && c.in.empty() && c.out.empty()) c.deadline = Clock::time_point::max();
  return true;
}

// Note [tcp store authentication] in tcp_protocol.hpp: the client's proof covers the port it
// dialed and its job; this server answers only for its own.
void TcpServer::handshake(Conn& c, const Fields& req) {
  c.closing = true;  // unless it authenticates below
  if (req.size() != 5 || req[0] != "auth" || req[1].empty() || req[1].size() > 64) {
    c.out = encode({"error", "authenticate first"});
    return;
  }
  const std::string port = std::to_string(port_);
  if (!same_secret_text(req[2], handshake_proof(secret_, "client", c.nonce, req[1],
                                                std::atoi(req[3].c_str()), req[4])) ||
      req[3].size() > 5) {
    c.out = encode({"error",
                    "authentication failed: this process does not hold the job's store secret "
                    "(SYMMFLOW_STORE_SECRET)"});
  } else if (req[3] != port) {
    c.out = encode({"error", fmt::format("the connection was dialed to port {} but this store "
                                         "listens on port {}: a relay (or a port mapping between "
                                         "the ranks) is refused",
                                         req[3].substr(0, 5), port)});
  } else if (req[4] != job_) {
    c.out = encode({"error", fmt::format("this store serves the job '{}', not '{}' (the ranks "
                                         "differ in SYMMFLOW_STORE_PREFIX, or another job's "
                                         "connection was relayed here)",
                                         job_, req[4].substr(0, 64))});
  } else {
    c.closing = false;
    c.authed = true;
    c.out = encode({"ok", handshake_proof(secret_, "server", c.nonce, req[1], port_, job_)});
  }
}

Fields TcpServer::answer(const Fields& req) {
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

void TcpServer::close_conn(int fd) {
  ::close(fd);
  conns_.erase(fd);
}

}  // namespace symmflow::store_detail
