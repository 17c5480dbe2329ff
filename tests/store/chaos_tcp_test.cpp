// Chaos: a third process attacks a job's TcpStore (issue 25; Note [tcp store authentication] in
// src/runtime/store/tcp_protocol.hpp, Note [tcp store server] in tcp_server.hpp). The attacker is
// a raw socket of this test, speaking the store's framing without the job's secret, unless a test
// says it holds it:
// - it reads no key (a hello's pids and host) and writes none (poison, a fake join of rank 1);
// - a world whose rank 1 an attacker tried to claim first still forms;
// - a second real process joining as rank 1 fails, and so do the world's ranks, naming why;
// - a client with another secret is refused, and a server that cannot prove the secret too;
// - a client that pipelines requests and never reads the replies stalls no other client;
// - a flood of connections holds at most the server's cap of descriptors;
// - a huge message closes the connection before it is buffered;
// - running out of descriptors does not make the server spin on accept.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <latch>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "chaos_support.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/runtime/store.hpp"

namespace symmflow::testing {
namespace {

using Millis = std::chrono::milliseconds;

TEST(ChaosTcp, AStrangerReadsNoKey) {
  TcpStore server("127.0.0.1", 0, true);
  server.set("w/hello/0", "2\n4242\nhost1\nhost1|pid:[1]\nff,");
  RawConnection attacker(server.port());
  attacker.send_bytes(frame({"get", "w/hello/0"}) + frame({"check", "w/hello/0"}));
  auto [got, closed] = attacker.drain(Millis(2000));
  EXPECT_EQ(got.find("4242"), std::string::npos) << "the attacker read the hello";
  EXPECT_TRUE(closed) << "the server kept the unauthenticated connection";
  EXPECT_NE(got.find("authenticate first"), std::string::npos) << got;
}

TEST(ChaosTcp, AStrangerWritesNoKey) {
  TcpStore server("127.0.0.1", 0, true);
  RawConnection attacker(server.port());
  attacker.send_bytes(frame({"set", "w/poison", "0\nhacked"}) + frame({"add", "w/join/1", "1"}) +
                      frame({"set", "w/hello/1", "2\n1\nevil\nevil\n0,"}));
  attacker.drain(Millis(1000));
  EXPECT_EQ(server.get("w/poison", Millis(0)), std::nullopt);
  EXPECT_EQ(server.get("w/join/1", Millis(0)), std::nullopt);
  EXPECT_EQ(server.get("w/hello/1", Millis(0)), std::nullopt);
}

TEST(ChaosTcp, AWorldFormsThoughAStrangerClaimedRankOneFirst) {
  TcpStore server("127.0.0.1", 0, true);
  RawConnection attacker(server.port());
  attacker.send_bytes(frame({"add", "w/join/1", "1"}) +
                      frame({"set", "w/hello/1", "2\n1\nevil\nevil\n0,"}));
  attacker.drain(Millis(500));
  int port = server.port();
  std::vector<std::string> errors = on_threads(2, [&](int r) {
    Runtime rt(make_store_bootstrap(
        store_options(std::make_shared<TcpStore>("127.0.0.1", port, false), r, 2, 5)));
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
}

TEST(ChaosTcp, ASecondJoinOfARankFailsItsWorldNamingWhy) {
  TcpStore server("127.0.0.1", 0, true);
  int port = server.port();
  auto open = [&] { return std::make_shared<TcpStore>("127.0.0.1", port, false); };
  std::latch formed(2), duplicate_refused(1);
  std::string duplicate_error;
  std::thread main_thread([&] {
    formed.wait();
    try {
      make_store_bootstrap(store_options(open(), 1, 2, 2));
    } catch (const Error& e) {
      duplicate_error = e.what();
    }
    duplicate_refused.count_down();
  });
  std::vector<std::string> errors = on_threads(2, [&](int r) {
    Runtime rt(make_store_bootstrap(store_options(open(), r, 2, 2)));
    formed.count_down();
    duplicate_refused.wait();
    if (r == 0) rt.bootstrap().barrier({0, 1}, "after", "chaos");  // rank 1 leaves instead
  });
  main_thread.join();
  std::string why = "init_store: rank 1 joined the world 'w' in tcp store 127.0.0.1:" +
                    std::to_string(port) +
                    " 2 times: two processes were given the same rank, or the store still holds "
                    "an earlier world (use a fresh directory or port, or another prefix)";
  EXPECT_EQ(duplicate_error, why);
  EXPECT_EQ(errors[0], "chaos: rank 1 failed (" + why + ") while rank 0 waited for rank 1");
}

TEST(ChaosTcp, AnotherSecretIsRefusedBothWays) {
  TcpStore server("127.0.0.1", 0, true);
  std::string what;
  {
    ScopedEnv other("SYMMFLOW_STORE_SECRET", "another-job-secret-0123456789");
    what = error_of([&] { TcpStore c("127.0.0.1", server.port(), false, Millis(2000)); });
  }
  EXPECT_EQ(what, "tcp store 127.0.0.1:" + std::to_string(server.port()) +
                      ": the server refused this process: authentication failed: this process "
                      "does not hold the job's store secret (SYMMFLOW_STORE_SECRET)");
  // A server that does not hold the secret (another job's store on a reused port).
  FakeServer fake;
  what = error_of([&] { TcpStore c("127.0.0.1", fake.port(), false, Millis(2000)); });
  EXPECT_EQ(what, "tcp store 127.0.0.1:" + std::to_string(fake.port()) +
                      ": the server could not prove that it holds this job's store secret: it is "
                      "another job's store (a reused port?) or its ranks were given another "
                      "SYMMFLOW_STORE_SECRET");
}

// Issue 39 item 8 (Note [tcp store authentication]): with one secret shared by two jobs (the
// per-user one), a process squatting job B's port relays B's rank to job A's server; the proof
// covers the port dialed, so A's server refuses it, and A's keys stay unread.
TEST(ChaosTcp, ARelayedHandshakeIsRefused) {
  TcpStore job_a("127.0.0.1", 0, true, Millis(3000), "", "job-a");
  job_a.set("job-a/hello/0", "secret stuff");
  Relay squatter(job_a.port());
  const std::string what = error_of([&] {
    TcpStore("127.0.0.1", squatter.port(), false, Millis(3000), "", "job-a");
  });
  EXPECT_EQ(what, fmt::format("tcp store 127.0.0.1:{}: the server refused this process: the "
                              "connection was dialed to port {} but this store listens on port "
                              "{}: a relay (or a port mapping between the ranks) is refused",
                              squatter.port(), squatter.port(), job_a.port()));
}

// A rank of another job (another prefix) that reaches this job's server is refused naming both.
TEST(ChaosTcp, AnotherJobsRankIsRefusedNamingTheJobs) {
  TcpStore job_a("127.0.0.1", 0, true, Millis(3000), "", "job-a");
  EXPECT_EQ(error_of([&] {
              TcpStore("127.0.0.1", job_a.port(), false, Millis(3000), "", "job-b");
            }),
            fmt::format("tcp store 127.0.0.1:{}: the server refused this process: this store "
                        "serves the job 'job-a', not 'job-b' (the ranks differ in "
                        "SYMMFLOW_STORE_PREFIX, or another job's connection was relayed here)",
                        job_a.port()));
  TcpStore("127.0.0.1", job_a.port(), false, Millis(3000), "", "job-a").set("k", "v");  // its own
  EXPECT_EQ(job_a.get("k", Millis(0)), "v");
}

TEST(ChaosTcp, AClientThatNeverReadsItsRepliesStallsNoOne) {
  TcpStore server("127.0.0.1", 0, true);
  server.set("big", std::string(1 << 20, 'x'));
  RawConnection greedy(server.port());
  ASSERT_TRUE(authenticate(greedy));  // a buggy rank: it holds the secret
  std::string requests;
  for (int i = 0; i < 2000; ++i) requests += frame({"get", "big"});
  greedy.send_bytes(requests);  // and never reads a reply
  std::this_thread::sleep_for(Millis(200));
  TcpStore client("127.0.0.1", server.port(), false, Millis(3000));
  auto start = std::chrono::steady_clock::now();
  std::string what = error_of([&] {
    for (int i = 0; i < 20; ++i) {
      client.set("k" + std::to_string(i), "v");
      client.get_value("k" + std::to_string(i), Millis(0));
    }
  });
  EXPECT_EQ(what, "<no error>");
  EXPECT_LT(std::chrono::steady_clock::now() - start, Millis(2000));
}

TEST(ChaosTcp, AFloodOfConnectionsHoldsAtMostTheCap) {
  TcpStore server("127.0.0.1", 0, true);
  int before = open_sockets();
  constexpr int kFlood = 300;
  std::vector<std::unique_ptr<RawConnection>> flood;
  for (int i = 0; i < kFlood; ++i) flood.push_back(std::make_unique<RawConnection>(server.port()));
  std::this_thread::sleep_for(Millis(500));  // the server accepts what it will
  int held = open_sockets() - before - kFlood;
  EXPECT_LE(held, 64) << "server-side sockets held for " << kFlood << " idle connections";
  TcpStore client("127.0.0.1", server.port(), false, Millis(2000));
  client.set("k", "v");
  EXPECT_EQ(server.get_value("k", Millis(0)), "v");
}

TEST(ChaosTcp, AHugeMessageIsRefusedBeforeItIsBuffered) {
  TcpStore server("127.0.0.1", 0, true);
  RawConnection attacker(server.port());
  uint32_t claimed = 64u << 20;
  std::string header(reinterpret_cast<const char*>(&claimed), 4);
  bool refused = !attacker.send_bytes(header);
  std::string chunk(1 << 20, 'z');
  for (int i = 0; i < 8 && !refused; ++i) refused = !attacker.send_bytes(chunk);
  if (!refused) refused = attacker.drain(Millis(1000)).second;
  EXPECT_TRUE(refused) << "the server kept reading an unauthenticated 64 MiB message";
  TcpStore client("127.0.0.1", server.port(), false, Millis(2000));
  client.set("k", "v");
}

TEST(ChaosTcp, RunningOutOfDescriptorsDoesNotSpin) {
  TcpStore server("127.0.0.1", 0, true);
  TcpStore client("127.0.0.1", server.port(), false, Millis(2000));
  std::vector<int> sockets;
  {
    ScopedFdLimit limit(20);  // 20 more descriptors than are open now
    constexpr int kFlags = SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK;
    for (int s; (s = ::socket(AF_INET, kFlags, 0)) >= 0;) sockets.push_back(s);
    ASSERT_EQ(errno, EMFILE);
    // Every descriptor is taken: the server's accept fails with EMFILE for these (non-blocking:
    // a server that accepts none fills its listen queue, and a blocking connect would wait).
    for (int s : sockets) connect_loopback(s, server.port());
    double cpu = process_cpu_seconds();
    std::this_thread::sleep_for(Millis(500));
    double spent = process_cpu_seconds() - cpu;
    // A busy loop spends the whole 0.5 s. A loaded CI machine charged 0.103 s to a server that
    // was not spinning (tick-based accounting bills whole ticks), so the bound is half of it.
    EXPECT_LT(spent, 0.25) << "the server busy-looped on accept for " << spent << " s of 0.5 s";
  }
  for (int s : sockets) ::close(s);
  client.set("k", "v");
  EXPECT_EQ(client.get_value("k", Millis(0)), "v");
}

}  // namespace
}  // namespace symmflow::testing
