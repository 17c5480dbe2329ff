// Key-value stores: how processes started by anything but mpirun (torchrun, a test, a serving
// engine) meet. The `store` transport (StoreBootstrap, src/runtime/store/) needs only these four
// calls, so any store can drive it: the two built in (FileStore, TcpStore) or one given as
// callbacks (CallbackStore), e.g. a PyTorch c10d.Store wrapped from Python.
//
// Contract of every KeyValueStore:
// - set(key, value): stores bytes under key, visible to every process of the store once set
//   returns; a key is written once by the transport (later sets replace the value).
// - get(key, timeout): the value, waiting until the key is set or `timeout` passes (nullopt).
// - wait(keys, timeout): true once every key is set, false when `timeout` passes first. Neither
//   get nor wait throws for a timeout: the caller decides (and names the key: get_value).
// - add(key, delta): atomically adds to the integer stored under key (absent counts as 0) and
//   returns the new value; the value is decimal text, so get() of the key reads it.
// - Errors of the store itself (I/O, a lost connection) raise symmflow::Error (System) naming
//   the store (describe()). Thread-safe: a bootstrap calls it from more than one thread.
// Refuses: empty keys (InvalidUsage).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "symmflow/runtime/bootstrap.hpp"

namespace symmflow {

class KeyValueStore {
 public:
  using Millis = std::chrono::milliseconds;
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  virtual std::optional<std::string> get(const std::string& key, Millis timeout) = 0;
  virtual bool wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // "file store /tmp/x", "tcp store 127.0.0.1:29500": for messages.
  virtual std::string describe() const = 0;

  // get() that raises Timeout "<op>: key 'k' was not set in <store> within 5 s".
  std::string get_value(const std::string& key, Millis timeout, std::string_view op = "store");
};

// A directory shared by the processes (a local or network file system). Each key is a file,
// written to a temporary name (O_EXCL) and renamed into place (readers never see half a value);
// add() holds an flock() on the key's lock file (released by the kernel if the holder dies).
// The directory is created (0700) if absent and refused (System, naming the path and why) when it
// is a symbolic link, belongs to another user, or group or others can write to it; every file is
// then reached relative to the checked directory, never through a link (Note [private directory]
// in src/runtime/store/private_files.hpp).
class FileStore : public KeyValueStore {
 public:
  explicit FileStore(std::string directory);
  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> get(const std::string& key, Millis timeout) override;
  bool wait(const std::vector<std::string>& keys, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string describe() const override;
  const std::string& directory() const { return dir_; }

 private:
  std::string name_of(const std::string& key) const;  // the key's file name in the directory
  std::optional<std::string> read(const std::string& key) const;
  std::string dir_;
  int dir_fd_ = -1;  // the checked directory
};

// A store served over TCP by one process (`serve`: it binds host:port, port 0 picks a free one)
// and reached by every process, the server's own included, through a connection each. Every
// connection authenticates with the job's secret, and the server with it too (Note [tcp store
// authentication] in src/runtime/store/tcp_protocol.hpp): `secret`, or when empty the one from
// SYMMFLOW_STORE_SECRET, SYMMFLOW_STORE_SECRET_FILE or the per-user secret file (Note [store
// secret]). Messages are length-prefixed and at most 16 MiB; waits poll the server, and the
// server blocks on no client (Note [tcp store server] in tcp_server.hpp). Connecting retries
// until `connect_timeout`; a secret that differs raises InvalidUsage at once.
class TcpStore : public KeyValueStore {
 public:
  // `job`: the world's key prefix, bound into the handshake with the port dialed, so that a
  // connection relayed from another job's port is refused (Note [tcp store authentication]).
  TcpStore(std::string host, int port, bool serve, Millis connect_timeout = Millis(30000),
           std::string secret = {}, std::string job = {});
  ~TcpStore() override;
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> get(const std::string& key, Millis timeout) override;
  bool wait(const std::vector<std::string>& keys, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string describe() const override;
  int port() const;      // the bound port (useful after port 0)
  bool serving() const;  // this process serves the keys

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A store given as callbacks (the Python binding wraps c10d.Store with these). `get` returns
// nullopt and `wait` false on timeout; exceptions they throw propagate.
struct StoreCallbacks {
  std::function<void(const std::string&, const std::string&)> set;
  std::function<std::optional<std::string>(const std::string&, KeyValueStore::Millis)> get;
  std::function<bool(const std::vector<std::string>&, KeyValueStore::Millis)> wait;
  std::function<int64_t(const std::string&, int64_t)> add;
  std::string name = "callback store";
};

class CallbackStore : public KeyValueStore {
 public:
  explicit CallbackStore(StoreCallbacks callbacks);  // every callback must be set
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> get(const std::string& key, Millis timeout) override;
  bool wait(const std::vector<std::string>& keys, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string describe() const override { return callbacks_.name; }

 private:
  StoreCallbacks callbacks_;
};

// A store that other processes may read and write (the launcher's c10d store: torchrun's
// TCPStore has no authentication) made safe for symmflow's values: each is encrypted and
// authenticated with the job's secret (`secret`, or when empty the store secret of Note [store
// secret]: SYMMFLOW_STORE_SECRET, SYMMFLOW_STORE_SECRET_FILE or the per-user file), bound to its
// key. A value not sealed with it reads as absent and is reported once on stderr (Note [sealed
// store values] in src/runtime/store/sealed_store.cpp). Counters (add) pass through unsealed.
class SealedStore : public KeyValueStore {
 public:
  explicit SealedStore(std::shared_ptr<KeyValueStore> inner, std::string secret = {});
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> get(const std::string& key, Millis timeout) override;
  bool wait(const std::vector<std::string>& keys, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string describe() const override;
  // Keys whose value was found not sealed with this job's secret (each counted once).
  size_t foreign_keys() const;

 private:
  std::string seal(const std::string& key, const std::string& value) const;
  std::optional<std::string> open(const std::string& key, const std::string& sealed) const;
  void report_foreign(const std::string& key) const;
  std::shared_ptr<KeyValueStore> inner_;
  std::string k_enc_, k_mac_;
  mutable std::mutex mutex_;
  mutable std::set<std::string> reported_;
  mutable size_t foreign_ = 0;
};

// "file:/path" -> FileStore; "tcp:host:port" -> TcpStore served by `rank` 0. Throws
// InvalidUsage naming the spelling otherwise.
std::shared_ptr<KeyValueStore> open_store(std::string_view spec, int rank,
                                          KeyValueStore::Millis connect_timeout,
                                          const std::string& job = {});

// How a process joins a world through a store (init_store in runtime.hpp; make_store_bootstrap).
struct StoreOptions {
  std::shared_ptr<KeyValueStore> store;
  int rank = -1;        // 0 <= rank < world_size, each rank exactly once
  int world_size = 0;
  std::string prefix = "symmflow";  // every key of this world starts with "<prefix>/"
  double timeout_s = -1;            // bound of every wait; <0: tunables().timeout_s
};

// The `store` transport's Bootstrap for this process (collective: returns once every rank of the
// world joined, or raises Timeout naming the ranks that did not). Contract in
// src/runtime/store/store_bootstrap.hpp. Most callers want init_store (runtime.hpp) instead;
// tests make one per thread to run a world of stores in one process.
std::unique_ptr<Bootstrap> make_store_bootstrap(const StoreOptions& options);

}  // namespace symmflow
