// The TCP store's wire protocol, handshake and secret (private header; the client is
// tcp_store.cpp, the server tcp_server.cpp).
//
// Note [tcp store protocol]: a message is a u32 byte count followed by that many bytes: a u32
// field count, then per field a u32 length and the bytes (native byte order: a store joins
// processes of one build on hosts of one architecture). After the handshake (below), requests
// and replies are:
//   set k v      -> ok              get k -> 1 v | 0
//   check k...   -> 1 | 0          add k d -> value (decimal)
// The server never blocks on a key: get / wait poll with `get` / `check` (50 µs doubling to
// 5 ms), so a client that goes away mid-wait costs the server nothing, and every wait is bounded
// by the caller's timeout. Nor does it block on a client (Note [tcp store server] in
// tcp_server.hpp). A message over kMaxMessage bytes (kMaxHandshakeMessage before the handshake)
// closes the connection.
//
// Note [tcp store authentication]: every connection proves that it holds the job's secret before
// the server reads or writes a key for it, and the server proves it too, so neither a local
// process of another user nor another job's store on a reused port can join, read or poison a
// world. Challenge and response, the secret never on the wire:
//   server -> client   {"symmflow-store/2", Ns}          Ns: 16 fresh random bytes, hex
//   client -> server   {"auth", Nc, HMAC(secret, "client\n" Ns "\n" Nc "\n" port "\n" job),
//                       port, job}
//   server -> client   {"ok", HMAC(secret, "server\n" Ns "\n" Nc "\n" port "\n" job)}
//                      or {"error", why}, closed
// `port` is the port the client dialed and `job` the world's key prefix (SYMMFLOW_STORE_PREFIX;
// "" when the store was made without one); the server answers only for its own listening port
// and job. So a process that squats another job's port and relays that job's handshake to this
// server is refused on both sides (issue 39 item 8): the dialed port differs from the one this
// server listens on, and a job of another prefix is named. Consequence: the ranks must dial the
// port the server listens on (no port mapping between them, e.g. docker -p 30000:29500).
// HMAC is HMAC-SHA-256 (sha256.hpp), compared in constant time. A fresh Ns per connection means a
// recorded exchange does not replay. Anything but a valid "auth" as the first message closes
// the connection. What this does not give: secrecy or integrity of the later traffic (it is plain
// TCP: whoever can read or inject packets on the path, root on a host for instance, is trusted
// anyway), nor protection from processes that hold the secret. The threat model is in
// docs/runtime.md ("Who the stores trust").
//
// Note [store secret]: the secret comes from, in order: SYMMFLOW_STORE_SECRET (the value, at
// least 16 characters; a launcher that starts every rank sets the same per-job value);
// SYMMFLOW_STORE_SECRET_FILE (a file owned by this user and readable by no one else, mode 0600 or
// stricter, holding it); else the per-user file $XDG_CONFIG_HOME/symmflow/store_secret
// ($HOME/.config/... without XDG_CONFIG_HOME), created with 32 random bytes on first use
// (O_EXCL in a directory of this user's that no one else can write; linked into place, so ranks
// creating it at once agree on one). The per-user file authenticates the processes of this user
// on hosts that share the home directory: that is the trust boundary the stores promise.
// Without any of the three (no home directory, a read-only one) the store refuses to start,
// saying what to set: it never runs unauthenticated.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

struct addrinfo;

namespace symmflow::store_detail {

using Fields = std::vector<std::string>;

constexpr uint32_t kMaxMessage = 16u << 20;
constexpr uint32_t kMaxHandshakeMessage = 1024;
constexpr const char* kServerHello = "symmflow-store/2";
constexpr size_t kMinSecretBytes = 16;

std::string encode(const Fields& fields);
// Decodes a message body; false when malformed.
bool decode(const char* p, size_t n, Fields& out);

// `bytes` random bytes from the kernel (getrandom), as hex.
std::string random_hex(size_t bytes);
// HMAC(secret, side "\n" server_nonce "\n" client_nonce "\n" port "\n" job) as hex (side:
// "client" or "server"; Note [tcp store authentication]).
std::string handshake_proof(std::string_view secret, std::string_view side,
                            std::string_view server_nonce, std::string_view client_nonce,
                            int port, std::string_view job);

// The job's secret (Note [store secret]); raises InvalidUsage naming what to set, prefixed by
// `who`.
std::string resolve_store_secret(const std::string& who);

// getaddrinfo for a stream socket (`passive`: to bind); freeaddrinfo the result. Raises System
// naming `who` when the host does not resolve.
addrinfo* resolve_address(const std::string& host, int port, bool passive, const std::string& who);

// Blocking I/O on a socket whose SO_RCVTIMEO / SO_SNDTIMEO bound every call. False when the
// connection failed (errno says why; 0: closed by the peer) or a message was malformed or over
// `max` bytes.
bool send_all(int fd, const std::string& bytes);
bool recv_message(int fd, uint32_t max, Fields& out);

// The client's side of the handshake on a fresh connection. Returns "" when authenticated, or
// why the connection was lost before it was (the caller may reconnect); raises InvalidUsage when
// either side refused the other's proof (a different secret: no retry helps).
// `port` is the port dialed, `job` the world's prefix (Note [tcp store authentication]).
std::string client_handshake(int fd, std::string_view secret, int port, const std::string& job,
                             const std::string& who);

}  // namespace symmflow::store_detail
