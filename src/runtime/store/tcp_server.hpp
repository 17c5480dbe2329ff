// The TCP store's server (private header): serves the keys of one TcpStore from a thread of its
// own.
//
// Note [tcp store server]: one thread, one poll loop, every socket non-blocking, so no client can
// stall the others: a reply the client does not read waits in that connection's buffer (and the
// server reads no further request from it until the reply is gone), a request that arrives in
// pieces waits in its buffer. Bounds, each closing the connection that passes it:
// - a connection must authenticate (Note [tcp store authentication] in tcp_protocol.hpp) within
//   io_timeout, in a first message of at most kMaxHandshakeMessage bytes; until then nothing else
//   is read or answered;
// - at most max_pending connections wait to authenticate: a new one evicts the oldest, so a flood
//   of idle connections cannot lock the job's ranks out, only make them reconnect;
// - at most max_clients connections in all (more are closed at once);
// - an authenticated request or reply that makes no progress for io_timeout, or a message over
//   max_message bytes (which the buffer never grows to: the length is checked first).
// Running out of descriptors (accept fails with EMFILE / ENFILE) would leave the connection in
// the listen queue and poll report it again at once: a busy loop. The server keeps one spare
// descriptor (/dev/null) for this: it closes it, accepts the connection, closes that and reopens
// the spare, shedding one queued connection per step (its client reconnects); when even that
// fails, or accept fails otherwise, it stops polling the listen socket for 100 ms.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>

#include "tcp_protocol.hpp"

namespace symmflow::store_detail {

struct ServerLimits {
  size_t max_clients = 4096;  // connections in all
  size_t max_pending = 64;    // connections not yet authenticated
  uint32_t max_message = kMaxMessage;
  std::chrono::milliseconds io_timeout{30000};
};

class TcpServer {
 public:
  // Binds host:port (port 0: a free one) and starts serving; raises System naming `who`.
  // `job`: the world's key prefix its clients must name (Note [tcp store authentication]).
  TcpServer(const std::string& host, int port, std::string secret, std::string job,
            ServerLimits limits, const std::string& who);
  ~TcpServer();
  TcpServer(const TcpServer&) = delete;
  TcpServer& operator=(const TcpServer&) = delete;
  int port() const { return port_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Conn {
    bool authed = false;
    bool closing = false;  // close once `out` is sent (after refusing the handshake)
    uint64_t serial = 0;   // order of acceptance: the oldest pending connection is evicted first
    std::string nonce;     // the server's challenge
    std::string in;        // bytes received, not yet a whole message
    std::string out;       // reply not yet sent, from out_done on
    size_t out_done = 0;
    Clock::time_point deadline = Clock::time_point::max();
  };

  void serve();
  void accept_ready(Clock::time_point now);
  void admit(int fd, Clock::time_point now);
  void shed_one();
  int flush(int fd, Conn& c, Clock::time_point now);
  // Each returns false when the connection must be closed.
  bool on_readable(int fd, Conn& c, Clock::time_point now);
  bool on_writable(int fd, Conn& c, Clock::time_point now);
  bool handle_messages(int fd, Conn& c, Clock::time_point now);
  void handshake(Conn& c, const Fields& req);
  Fields answer(const Fields& req);
  void close_conn(int fd);
  size_t pending() const;

  std::string secret_;
  std::string job_;
  ServerLimits limits_;
  int listen_fd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  int spare_fd_ = -1;
  uint64_t next_serial_ = 0;
  Clock::time_point accept_paused_until_{};
  std::map<int, Conn> conns_;  // by descriptor
  std::map<std::string, std::string> keys_;
  std::thread thread_;
};

}  // namespace symmflow::store_detail
