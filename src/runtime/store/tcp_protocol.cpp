// The TCP store's messages and the client's side of the handshake: Note [tcp store protocol] and
// Note [tcp store authentication] in tcp_protocol.hpp.
#include "tcp_protocol.hpp"

#include <netdb.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "sha256.hpp"
#include "symmflow/core/error.hpp"

namespace symmflow::store_detail {

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

bool decode(const char* p, size_t n, Fields& out) {
  auto get = [&](uint32_t& v) {
    if (n < 4) return false;
    std::memcpy(&v, p, 4);
    p += 4;
    n -= 4;
    return true;
  };
  uint32_t count = 0;
  if (!get(count) || count > n / 4) return false;
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

std::string random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::getrandom(raw.data() + done, bytes - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw_error(ErrorCode::System, "getrandom: {} (no randomness for the store's handshake)",
                  std::strerror(errno));
    done += size_t(n);
  }
  std::string out;
  for (unsigned char c : raw) out += fmt::format("{:02x}", unsigned(c));
  return out;
}

std::string handshake_proof(std::string_view secret, std::string_view side,
                            std::string_view server_nonce, std::string_view client_nonce,
                            int port, std::string_view job) {
  std::string message =
      fmt::format("{}\n{}\n{}\n{}\n{}", side, server_nonce, client_nonce, port, job);
  return to_hex(hmac_sha256(secret, message));
}

addrinfo* resolve_address(const std::string& host, int port, bool passive, const std::string& who) {
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

bool send_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    errno = 0;
    ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

bool recv_message(int fd, uint32_t max, Fields& out) {
  auto recv_all = [&](char* p, size_t n) {
    while (n) {
      errno = 0;
      ssize_t r = ::recv(fd, p, n, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      p += r;
      n -= size_t(r);
    }
    return true;
  };
  uint32_t len = 0;
  if (!recv_all(reinterpret_cast<char*>(&len), 4)) return false;
  errno = EPROTO;
  if (len > max) return false;
  std::string body(len, '\0');
  if (!recv_all(body.data(), len)) return false;
  errno = EPROTO;
  return decode(body.data(), body.size(), out);
}

std::string client_handshake(int fd, std::string_view secret, int port, const std::string& job,
                             const std::string& who) {
  auto lost = [](const char* what) {
    return fmt::format("{}: {}", what, errno ? std::strerror(errno) : "closed by the server");
  };
  Fields hello;
  if (!recv_message(fd, kMaxHandshakeMessage, hello)) return lost("no challenge");
  if (hello.size() != 2 || hello[0] != kServerHello)
    invalid_usage("{}: the process on this port is not a symmflow store of this version (it "
                  "greeted with '{}'); is the port another service's?",
                  who, hello.empty() ? "" : hello[0].substr(0, 40));
  std::string nonce = random_hex(16);
  if (!send_all(fd, encode({"auth", nonce,
                            handshake_proof(secret, "client", hello[1], nonce, port, job),
                            std::to_string(port), job})))
    return lost("handshake send");
  Fields reply;
  if (!recv_message(fd, kMaxHandshakeMessage, reply)) return lost("handshake reply");
  if (reply.size() == 2 && reply[0] == "error")
    invalid_usage("{}: the server refused this process: {}", who, reply[1]);
  if (reply.size() != 2 || reply[0] != "ok" ||
      !same_secret_text(reply[1], handshake_proof(secret, "server", hello[1], nonce, port, job)))
    invalid_usage("{}: the server could not prove that it holds this job's store secret: it is "
                  "another job's store (a reused port?) or its ranks were given another "
                  "SYMMFLOW_STORE_SECRET",
                  who);
  return "";
}

}  // namespace symmflow::store_detail
