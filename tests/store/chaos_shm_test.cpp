// Chaos: shared memory of the store transport under pressure (issue 25; Note [store shared
// memory] in src/runtime/store/host_memory.hpp), with real processes (spawn.hpp, chaos_child.cpp):
// - a heap larger than a small /dev/shm (a 1 MiB tmpfs in a private mount namespace, as Docker's
//   64 MiB one) raises "out of shared memory in /dev/shm" on every rank, where it was a SIGBUS;
//   where no mount namespace can be made, the same error for a heap larger than the free space
//   of the real /dev/shm stands in (the statvfs check);
// - a rank SIGKILLed between creating its block and its peers mapping it leaves no name in
//   /dev/shm: the peer that sees it die removes it, and so does the next process that creates
//   a block when no peer was left.
#include <sched.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include <gtest/gtest.h>

#include "runtime/store/host_memory.hpp"
#include "spawn.hpp"
#include "symmflow/core/error.hpp"
#include "temp_dir.hpp"

namespace symmflow::testing {
namespace {

bool shm_exists(const std::string& name) {  // name: "/symmflow...."
  return ::access(("/dev/shm" + name).c_str(), F_OK) == 0;
}

std::string line_after(const std::string& out, const std::string& prefix) {
  size_t at = out.find(prefix);
  if (at == std::string::npos) return "";
  size_t end = out.find('\n', at);
  return out.substr(at + prefix.size(), end - at - prefix.size());
}

// Makes this process the only one to see a fresh tmpfs of `size` on /dev/shm (a user namespace
// too when not root). False when the kernel or the container does not allow it.
bool private_dev_shm(const char* size) {
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  if (::unshare(CLONE_NEWNS | (uid == 0 ? 0 : CLONE_NEWUSER)) != 0) return false;
  if (uid != 0) {
    std::ofstream("/proc/self/setgroups") << "deny";
    std::ofstream("/proc/self/uid_map") << "0 " << uid << " 1";
    std::ofstream("/proc/self/gid_map") << "0 " << gid << " 1";
  }
  return ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
         ::mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
                 (std::string("size=") + size).c_str()) == 0;
}

void expect_out_of_shm_on_every_rank(const ChildWorld& world, int ranks, uint64_t bytes) {
  for (int r = 0; r < ranks; ++r) {
    std::string out = world.output(r);
    EXPECT_EQ(world.exit_code(r), 0) << world.all_output();
    EXPECT_EQ(out.find("allocated"), std::string::npos) << out;
    for (int peer = 0; peer < ranks; ++peer)
      EXPECT_NE(out.find("\n  rank " + std::to_string(peer) +
                         ": out of shared memory in /dev/shm: need " + std::to_string(bytes) +
                         " bytes, free "),
                std::string::npos)
          << out;
  }
}

TEST(ChaosShm, AHeapLargerThanASmallDevShmFailsOnEveryRankNotWithSigbus) {
  TempDir dir;
  constexpr uint64_t kBytes = 4 << 20;  // on a 1 MiB /dev/shm
  pid_t host = ::fork();
  if (host == 0) {  // a host of its own, with its own /dev/shm, running the world
    if (!private_dev_shm("1m")) ::_exit(77);
    ChildWorld world(dir.path(), 2);
    world.start({"chaos_alloc", "file:" + dir.path() + "/store", "a", 10, -1,
                 {{"STORE_TEST_BYTES", std::to_string(kBytes)}, {"STORE_TEST_FILL", "1"}}});
    bool ended = world.wait_all(std::chrono::seconds(30));
    std::ofstream(dir.path() + "/codes") << world.exit_code(0) << " " << world.exit_code(1);
    ::_exit(ended ? 0 : 1);
  }
  int status = 0;
  ::waitpid(host, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
    GTEST_SKIP() << "no private mount namespace here (unshare refused); "
                    "AHeapLargerThanTheFreeDevShmFailsOnEveryRank covers the error";
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the world did not end";
  ChildWorld logs(dir.path(), 2);  // to read the ranks' output
  std::ifstream codes(dir.path() + "/codes");
  int code0 = -1, code1 = -1;
  codes >> code0 >> code1;
  EXPECT_EQ(code0, 0) << "rank 0 ended with " << code0 << " (135: SIGBUS)\n" << logs.all_output();
  EXPECT_EQ(code1, 0) << "rank 1 ended with " << code1 << " (135: SIGBUS)\n" << logs.all_output();
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(logs.output(r).find("out of shared memory in /dev/shm: need " +
                                  std::to_string(kBytes) + " bytes, free "),
              std::string::npos)
        << logs.all_output();
}

TEST(ChaosShm, AHeapLargerThanTheFreeDevShmFailsOnEveryRank) {
  struct statvfs fs {};
  ASSERT_EQ(::statvfs("/dev/shm", &fs), 0);
  uint64_t bytes = uint64_t(fs.f_bavail) * fs.f_frsize + (1ull << 30);  // never touched
  TempDir dir;
  ChildWorld world(dir.path(), 2);
  world.start({"chaos_alloc", "file:" + dir.path() + "/store", "b", 10, -1,
               {{"STORE_TEST_BYTES", std::to_string(bytes)}}});
  ASSERT_TRUE(world.wait_all(std::chrono::seconds(30))) << world.all_output();
  expect_out_of_shm_on_every_rank(world, 2, bytes);
}

TEST(ChaosShm, ARankKilledBeforeItsPeersMappedItsBlockLeavesNoName) {
  TempDir dir;
  ChildWorld world(dir.path(), 2);
  world.start({"chaos_orphan", "file:" + dir.path() + "/store", "o", 10});
  ASSERT_TRUE(world.wait_for_line({1}, "block ", std::chrono::seconds(20))) << world.all_output();
  ASSERT_TRUE(world.wait_for_line({0}, "ready", std::chrono::seconds(20))) << world.all_output();
  std::string name = line_after(world.output(1), "block ");
  ASSERT_TRUE(shm_exists(name)) << name;
  world.kill_rank(1);
  ASSERT_TRUE(world.wait_all(std::chrono::seconds(20))) << world.all_output();
  EXPECT_NE(world.output(0).find("code: PeerFailure"), std::string::npos) << world.all_output();
  EXPECT_FALSE(shm_exists(name)) << "/dev/shm" << name << " was left behind";
}

TEST(ChaosShm, TheNextProcessRemovesTheBlocksOfADeadOne) {
  TempDir dir;
  std::string name;
  {
    ChildWorld lone(dir.path(), 1);  // no peer is left to see it die
    lone.start({"chaos_orphan", "file:" + dir.path() + "/first", "o", 10});
    ASSERT_TRUE(lone.wait_for_line({0}, "block ", std::chrono::seconds(20))) << lone.all_output();
    name = line_after(lone.output(0), "block ");
    lone.kill_rank(0);
    lone.wait_all(std::chrono::seconds(10));
  }
  ASSERT_TRUE(shm_exists(name)) << name;
  ChildWorld next(dir.path(), 1);
  next.start({"chaos_create", "file:" + dir.path() + "/second", "c", 10});
  ASSERT_TRUE(next.wait_all(std::chrono::seconds(20))) << next.all_output();
  EXPECT_NE(next.output(0).find("created "), std::string::npos) << next.all_output();
  EXPECT_FALSE(shm_exists(name)) << "/dev/shm" << name << " was left behind";
}

}  // namespace
}  // namespace symmflow::testing

namespace symmflow::testing {
namespace {

std::string open_error(const std::string& name) {
  try {
    HostBlock::open(name, 64);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// Note [foreign blocks]: a name the store hands over is opened only when symmflow makes such
// names, and the object only when it is this user's with mode 0600.
TEST(ChaosShm, AForeignBlockIsNeverMapped) {
  for (const char* name : {"/etc", "/symmflow.1.2", "/symmflow.1.2.3/x", "/symmflow..1.2",
                           "/other.1.2.3"}) {
    EXPECT_EQ(open_error(name),
              std::string("refusing host shared memory '") + name +
                  "': not a name symmflow makes (/symmflow.<ns>.<pid>.<n>); the store handed "
                  "this rank another name (Note [foreign blocks])");
  }
  const std::string name = "/symmflow.0." + std::to_string(::getpid()) + ".987654";
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  ASSERT_EQ(::fchmod(fd, 0644), 0);  // readable by others: not as symmflow makes it
  EXPECT_EQ(open_error(name),
            "refusing host shared memory " + name + ": it belongs to uid " +
                std::to_string(::geteuid()) + " with mode 0644, not to this process's user (uid " +
                std::to_string(::geteuid()) +
                ") with mode 0600 as symmflow makes it; another process may have planted it "
                "(Note [foreign blocks])");
  ASSERT_EQ(::fchmod(fd, 0600), 0);
  EXPECT_EQ(open_error(name), "<no error>");  // as symmflow makes it: opened
  ::close(fd);
  ::shm_unlink(name.c_str());
}

}  // namespace
}  // namespace symmflow::testing
