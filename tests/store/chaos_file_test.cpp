// Chaos: another user prepares the directory of a job's FileStore (issue 25; Note [private
// directory] in src/runtime/store/private_files.hpp) or the store secret's file:
// - a directory that others can write, a symbolic link to a directory, and a directory of another
//   user are refused, naming the path and why;
// - with a world-writable directory and a link planted where the store writes its temporary
//   file, no file outside is written (the original attack: a root process overwrote a file);
// - links planted in the directory itself are never followed, for a write or a read;
// - the secret file must be this user's and private; the per-user secret is created once.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "chaos_support.hpp"
#include "symmflow/runtime/store.hpp"
#include "temp_dir.hpp"

namespace symmflow::testing {
namespace {

using Millis = std::chrono::milliseconds;

std::string contents(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
}

TEST(ChaosFile, ADirectoryOthersCanWriteIsRefused) {
  TempDir dir;
  std::string shared = dir.path() + "/shared";
  ASSERT_EQ(::mkdir(shared.c_str(), 0700), 0);
  ::chmod(shared.c_str(), 01777);  // like /tmp
  EXPECT_EQ(error_of([&] { FileStore s(shared); }),
            "FileStore: refusing " + shared +
                ": group or others can write to it (mode 1777): they could read or plant keys; "
                "use a directory only you can write (mktemp -d, or chmod go-w)");
}

TEST(ChaosFile, ASymbolicLinkIsRefused) {
  TempDir dir;
  std::string link = dir.path() + "/store";
  std::filesystem::create_symlink(dir.path(), link);
  EXPECT_EQ(error_of([&] { FileStore s(link); }),
            "FileStore: refusing " + link +
                ": it is a symbolic link (use the real directory; a link in a shared directory "
                "such as /tmp can be planted by another user)");
}

TEST(ChaosFile, ADirectoryOfAnotherUserIsRefused) {
  TempDir dir;
  std::string theirs = dir.path() + "/theirs";
  uid_t owner = 0;
  if (::geteuid() == 0) {  // root: make it nobody's
    ASSERT_EQ(::mkdir(theirs.c_str(), 0700), 0);
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    owner = 65534;
  } else {
    theirs = "/";  // root's
  }
  EXPECT_EQ(error_of([&] { FileStore s(theirs); }),
            "FileStore: refusing " + theirs + ": it belongs to uid " + std::to_string(owner) +
                ", not to this process's user (uid " + std::to_string(::geteuid()) +
                "): its owner could read or plant keys; use a fresh directory of your own "
                "(mktemp -d)");
}

// The attack of issue 25: a world-writable store directory with links planted at the names of
// the temporary files the store writes.
TEST(ChaosFile, PlantedLinksInAWorldWritableDirectoryWriteNothingOutside) {
  TempDir dir;
  std::string shared = dir.path() + "/job42", victim = dir.path() + "/victim";
  ASSERT_EQ(::mkdir(shared.c_str(), 0700), 0);
  ::chmod(shared.c_str(), 0777);
  write_file(victim, "precious");
  for (int n = 0; n < 4; ++n)
    std::filesystem::create_symlink(
        victim, shared + "/.tmp." + std::to_string(::getpid()) + "." + std::to_string(n));
  std::string what = error_of([&] {
    FileStore s(shared);
    s.set("k", "pwned");
  });
  EXPECT_NE(what.find("FileStore: refusing " + shared), std::string::npos) << what;
  EXPECT_EQ(contents(victim), "precious");
}

TEST(ChaosFile, LinksInsideAPrivateDirectoryAreNeverFollowed) {
  TempDir dir;
  std::string store = dir.path() + "/store", victim = dir.path() + "/victim";
  write_file(victim, "precious");
  FileStore s(store);
  for (int n = 0; n < 4; ++n)
    std::filesystem::create_symlink(
        victim, store + "/.tmp." + std::to_string(::getpid()) + "." + std::to_string(n));
  std::filesystem::create_symlink(victim, store + "/k_linked");
  s.set("k", "v");  // a fresh temporary name, not the planted links
  EXPECT_EQ(s.get_value("k", Millis(0)), "v");
  EXPECT_EQ(contents(victim), "precious");
  std::string what = error_of([&] { s.get("linked", Millis(0)); });
  EXPECT_EQ(what.rfind("FileStore: cannot open " + store + "/k_linked: ", 0), 0u) << what;
}

TEST(ChaosFile, TheSecretFileMustBePrivate) {
  TempDir dir;
  std::string file = dir.path() + "/secret";
  write_file(file, "a-secret-of-enough-characters\n", 0644);
  ScopedEnv no_value("SYMMFLOW_STORE_SECRET", nullptr);
  ScopedEnv from_file("SYMMFLOW_STORE_SECRET_FILE", file.c_str());
  EXPECT_EQ(error_of([] { TcpStore s("127.0.0.1", 0, true, Millis(1000)); }),
            "tcp store 127.0.0.1:0: refusing SYMMFLOW_STORE_SECRET_FILE " + file +
                ": group or others can read or write it (mode 0644); chmod 600 it");
  ::chmod(file.c_str(), 0600);
  TcpStore server("127.0.0.1", 0, true, Millis(1000));
  ScopedEnv by_value("SYMMFLOW_STORE_SECRET", "a-secret-of-enough-characters");
  TcpStore client("127.0.0.1", server.port(), false, Millis(1000));  // the same secret
  ScopedEnv too_short("SYMMFLOW_STORE_SECRET", "short");
  EXPECT_EQ(error_of([] { TcpStore s("127.0.0.1", 0, true, Millis(1000)); }),
            "tcp store 127.0.0.1:0: the store secret from SYMMFLOW_STORE_SECRET has 5 characters; "
            "use at least 16 (for example `head -c 32 /dev/urandom | base64`)");
}

TEST(ChaosFile, ThePerUserSecretIsCreatedOncePrivately) {
  TempDir dir;
  ScopedEnv no_value("SYMMFLOW_STORE_SECRET", nullptr);
  ScopedEnv no_file("SYMMFLOW_STORE_SECRET_FILE", nullptr);
  ScopedEnv config("XDG_CONFIG_HOME", dir.path().c_str());
  TcpStore server("127.0.0.1", 0, true, Millis(1000));
  std::string file = dir.path() + "/symmflow/store_secret";
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string secret = contents(file);
  EXPECT_EQ(secret.size(), 65u);  // 32 random bytes, hex, and a newline
  TcpStore client("127.0.0.1", server.port(), false, Millis(1000));
  EXPECT_EQ(contents(file), secret);
  ScopedEnv no_config("XDG_CONFIG_HOME", nullptr);
  ScopedEnv no_home("HOME", nullptr);
  EXPECT_EQ(error_of([] { TcpStore s("127.0.0.1", 0, true, Millis(1000)); }),
            "tcp store 127.0.0.1:0: no store secret: set SYMMFLOW_STORE_SECRET (the same value of "
            "at least 16 characters on every rank) or SYMMFLOW_STORE_SECRET_FILE, or HOME so that "
            "one is kept in ~/.config/symmflow/store_secret");
}

}  // namespace
}  // namespace symmflow::testing
