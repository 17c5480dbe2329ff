// Unit tests of the key-value stores (store.hpp): FileStore, TcpStore and CallbackStore each
// set / get / wait / add, bounded waits that report a timeout and name the key, binary values,
// add from many threads at once, the spellings open_store accepts, and the TCP store's SHA-256 and
// HMAC against the standard vectors. (Attacks on the stores: chaos_*_test.cpp.)
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "symmflow/core/error.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "runtime/store/sha256.hpp"
#include "symmflow/runtime/store.hpp"
#include "temp_dir.hpp"

namespace symmflow::testing {
namespace {

using Millis = std::chrono::milliseconds;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

// The behaviour every store shares.
void check_store(KeyValueStore& s, KeyValueStore& other) {
  s.set("a/b:c", std::string("x\0y\nz", 5));
  EXPECT_EQ(other.get("a/b:c", Millis(1000)), std::string("x\0y\nz", 5));
  s.set("a/b:c", "replaced");
  EXPECT_EQ(other.get_value("a/b:c", Millis(0)), "replaced");
  s.set("empty", "");
  EXPECT_EQ(other.get("empty", Millis(0)), "");

  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(other.get("missing", Millis(60)), std::nullopt);
  EXPECT_FALSE(other.wait({"empty", "missing"}, Millis(60)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, Millis(120));
  EXPECT_TRUE(other.wait({"empty", "a/b:c"}, Millis(0)));
  EXPECT_EQ(error_of([&] { other.get_value("missing", Millis(50), "init_store"); }),
            "init_store: key 'missing' was not set in " + other.describe() + " within 0.05 s");

  // A key set later by another thread ends a wait early.
  std::thread late([&] {
    std::this_thread::sleep_for(Millis(50));
    s.set("late", "1");
  });
  EXPECT_TRUE(other.wait({"late"}, Millis(5000)));
  late.join();

  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(other.add("n", -2), 3);
  EXPECT_EQ(other.get_value("n", Millis(0)), "3");
  EXPECT_EQ(error_of([&] { s.set("", "x"); }), s.describe() + ": empty key");
}

void check_concurrent_add(const std::function<std::unique_ptr<KeyValueStore>()>& open) {
  constexpr int kThreads = 4, kAdds = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      std::unique_ptr<KeyValueStore> s = open();
      for (int i = 0; i < kAdds; ++i) s->add("counter", 1);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(open()->get_value("counter", Millis(0)), std::to_string(kThreads * kAdds));
}

TEST(StoreFile, SetGetWaitAdd) {
  TempDir dir;
  FileStore a(dir.path()), b(dir.path());
  EXPECT_EQ(a.describe(), "file store " + dir.path());
  check_store(a, b);
}

TEST(StoreFile, ConcurrentAddIsAtomic) {
  TempDir dir;
  check_concurrent_add([&] { return std::make_unique<FileStore>(dir.path()); });
}

TEST(StoreFile, RefusesAFileAsDirectory) {
  TempDir dir;
  FileStore(dir.path()).set("k", "v");
  std::string file = dir.path() + "/k_k";
  EXPECT_EQ(error_of([&] { FileStore s(file); }), "FileStore: " + file + " is not a directory");
}

TEST(StoreTcp, SetGetWaitAdd) {
  TcpStore server("127.0.0.1", 0, true);
  ASSERT_GT(server.port(), 0);
  EXPECT_TRUE(server.serving());
  TcpStore client("127.0.0.1", server.port(), false);
  EXPECT_FALSE(client.serving());
  EXPECT_EQ(client.describe(), "tcp store 127.0.0.1:" + std::to_string(server.port()));
  check_store(server, client);
}

TEST(StoreTcp, ConcurrentAddIsAtomic) {
  TcpStore server("127.0.0.1", 0, true);
  check_concurrent_add(
      [&] { return std::make_unique<TcpStore>("127.0.0.1", server.port(), false); });
}

TEST(StoreTcp, ClientWaitsForALateServer) {
  int port = free_port();
  std::unique_ptr<TcpStore> server;
  std::thread late([&] {
    std::this_thread::sleep_for(Millis(100));
    server = std::make_unique<TcpStore>("127.0.0.1", port, true);
  });
  TcpStore client("127.0.0.1", port, false, Millis(5000));
  late.join();
  client.set("k", "v");
  EXPECT_EQ(server->get_value("k", Millis(0)), "v");
}

TEST(StoreTcp, ConnectTimesOutNamingTheStore) {
  int port = free_port();
  std::string what = error_of([&] { TcpStore c("127.0.0.1", port, false, Millis(100)); });
  EXPECT_EQ(what.rfind("tcp store 127.0.0.1:" + std::to_string(port) +
                           ": cannot connect within 0.1 s: ",
                       0),
            0u)
      << what;
}

TEST(StoreTcp, LostServerRaises) {
  auto server = std::make_unique<TcpStore>("127.0.0.1", 0, true);
  TcpStore client("127.0.0.1", server->port(), false);
  client.set("k", "v");
  server.reset();
  std::string what = error_of([&] { client.get("k", Millis(0)); });
  EXPECT_NE(what.find(": connection lost ("), std::string::npos) << what;
}

// FIPS 180-4 examples and RFC 4231 test cases 1, 2 and 6 (a key longer than a block).
TEST(StoreAuth, Sha256AndHmacMatchTheStandardVectors) {
  using store_detail::hmac_sha256;
  using store_detail::sha256;
  using store_detail::to_hex;
  EXPECT_EQ(to_hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(to_hex(sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(to_hex(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(to_hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(to_hex(hmac_sha256(std::string(131, '\xaa'),
                               "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(StoreCallback, ForwardsToTheCallbacks) {
  std::mutex m;
  std::map<std::string, std::string> kv;
  StoreCallbacks cb;
  cb.set = [&](const std::string& k, const std::string& v) {
    std::lock_guard l(m);
    kv[k] = v;
  };
  cb.get = [&](const std::string& k, Millis t) -> std::optional<std::string> {
    auto deadline = std::chrono::steady_clock::now() + t;
    for (;;) {
      {
        std::lock_guard l(m);
        if (kv.count(k)) return kv[k];
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(Millis(1));
    }
  };
  cb.wait = [&](const std::vector<std::string>& keys, Millis t) {
    for (const std::string& k : keys)
      if (!cb.get(k, t)) return false;
    return true;
  };
  cb.add = [&](const std::string& k, int64_t d) {
    std::lock_guard l(m);
    int64_t v = (kv.count(k) ? std::stoll(kv[k]) : 0) + d;
    kv[k] = std::to_string(v);
    return v;
  };
  cb.name = "map store";
  CallbackStore a(cb), b(cb);
  check_store(a, b);
}

TEST(StoreCallback, RefusesMissingCallbacks) {
  EXPECT_EQ(error_of([] { CallbackStore s(StoreCallbacks{}); }),
            "CallbackStore: every callback (set, get, wait, add) must be given");
}

// Whether this machine has an IPv6 loopback (a container may not).
bool ipv6_loopback() {
  int s = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (s < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(s);
  return ok;
}

TEST(StoreSpec, OpensFileAndTcpStoresAndRefusesOthers) {
  TempDir dir;
  EXPECT_EQ(open_store("file:" + dir.path(), 3, Millis(100))->describe(),
            "file store " + dir.path());
  int port = free_port();
  auto served = open_store("tcp:127.0.0.1:" + std::to_string(port), 0, Millis(1000));
  EXPECT_EQ(served->describe(), "tcp store 127.0.0.1:" + std::to_string(port));
  EXPECT_TRUE(dynamic_cast<TcpStore&>(*served).serving());
  auto client = open_store("tcp:127.0.0.1:" + std::to_string(port), 1, Millis(1000));
  EXPECT_FALSE(dynamic_cast<TcpStore&>(*client).serving());
  // An IPv6 address, bracketed as in URLs (issue 39 item 9); the store works over it.
  if (ipv6_loopback()) {
    int port6 = free_port();
    auto served6 = open_store("tcp:[::1]:" + std::to_string(port6), 0, Millis(1000));
    EXPECT_EQ(served6->describe(), "tcp store [::1]:" + std::to_string(port6));
    auto client6 = open_store("tcp:[::1]:" + std::to_string(port6), 1, Millis(1000));
    client6->set("k", "v6");
    EXPECT_EQ(served6->get("k", Millis(1000)), "v6");
  }
  for (const char* bad : {"file:", "tcp:host", "tcp:host:0", "tcp::12", "redis:x", "tcp:h:12x",
                          "tcp:[]:12"})
    EXPECT_EQ(error_of([&] { open_store(bad, 0, Millis(10)); }),
              std::string("store '") + bad +
                  "': expected file:<directory> or tcp:<host>:<port> (port 1-65535)")
        << bad;
}

TEST(StoreEnv, MissingVariablesAreNamed) {
  ::unsetenv("SYMMFLOW_STORE");
  EXPECT_EQ(error_of([] { init_store_from_env(); }),
            "init_store_from_env: SYMMFLOW_STORE is not set (file:<directory> or "
            "tcp:<host>:<port>)");
  TempDir dir;
  ::setenv("SYMMFLOW_STORE", ("file:" + dir.path()).c_str(), 1);
  ::unsetenv("RANK");
  EXPECT_EQ(error_of([] { init_store_from_env(); }),
            "init_store_from_env: RANK is not set (launchers such as torchrun set RANK and "
            "WORLD_SIZE)");
  ::setenv("RANK", "x1", 1);
  EXPECT_EQ(error_of([] { init_store_from_env(); }),
            "init_store_from_env: RANK=x1: expected an integer in [0, 65536]");
  ::unsetenv("SYMMFLOW_STORE");
  ::unsetenv("RANK");
}

}  // namespace
}  // namespace symmflow::testing
