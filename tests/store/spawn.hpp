// Starting the ranks of a store world as child processes of the test (fork + exec of this same
// binary with --child), and reaping them within a bound.
//
// Contract: ChildWorld::start forks `world` children; child r runs `<self> --child <scenario>`
// with RANK, WORLD_SIZE, SYMMFLOW_STORE, SYMMFLOW_STORE_PREFIX and SYMMFLOW_TIMEOUT_S set (the
// env form of init_store) and its stdout+stderr in a file of its own. Every child dies with the
// test (PR_SET_PDEATHSIG), and the destructor SIGKILLs and reaps any child still running, so a
// failing or hung test leaves no orphan. wait_all() returns false (after killing them) when the
// children do not all end within the bound.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace symmflow::testing {

struct ChildSpec {
  std::string scenario;
  std::string store;  // SYMMFLOW_STORE
  std::string prefix = "t";
  double timeout_s = 20;
  int victim = -1;  // STORE_TEST_VICTIM for the kill scenario (-1: the last rank)
  using Env = std::vector<std::pair<std::string, std::string>>;
  Env env = {};                 // more variables for the children
  std::vector<int> hosts = {};  // SYMMFLOW_HOST_ID of each rank (empty: unset)
};

class ChildWorld {
 public:
  ChildWorld(std::string dir, int world) : dir_(std::move(dir)), world_(world) {}
  ChildWorld(const ChildWorld&) = delete;
  ChildWorld& operator=(const ChildWorld&) = delete;
  ~ChildWorld() { kill_all(); }

  void start(const ChildSpec& spec) {
    for (int r = 0; r < world_; ++r) {
      std::string out = log(r);
      pid_t pid = ::fork();
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::setenv("RANK", std::to_string(r).c_str(), 1);
        ::setenv("WORLD_SIZE", std::to_string(world_).c_str(), 1);
        ::setenv("SYMMFLOW_STORE", spec.store.c_str(), 1);
        ::setenv("SYMMFLOW_STORE_PREFIX", spec.prefix.c_str(), 1);
        ::setenv("SYMMFLOW_TIMEOUT_S", std::to_string(spec.timeout_s).c_str(), 1);
        ::setenv("STORE_TEST_VICTIM", std::to_string(spec.victim).c_str(), 1);
        for (const auto& [name, value] : spec.env) ::setenv(name.c_str(), value.c_str(), 1);
        if (!spec.hosts.empty())
          ::setenv("SYMMFLOW_HOST_ID", std::to_string(spec.hosts.at(size_t(r))).c_str(), 1);
        const char* argv[] = {"test_store", "--child", spec.scenario.c_str(), nullptr};
        ::execv("/proc/self/exe", const_cast<char* const*>(argv));
        ::_exit(127);
      }
      pids_.push_back(pid);
      status_.push_back(-1);
    }
  }

  // Waits until every child ended (true) or `bound` passed (false: all are killed).
  bool wait_all(std::chrono::duration<double> bound) {
    auto deadline = std::chrono::steady_clock::now() + bound;
    for (;;) {
      reap();
      if (running() == 0) return true;
      if (std::chrono::steady_clock::now() > deadline) {
        kill_all();
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  // Waits until every rank in `ranks` printed `line` (true) or `bound` passed.
  bool wait_for_line(const std::vector<int>& ranks, const std::string& line,
                     std::chrono::duration<double> bound) {
    auto deadline = std::chrono::steady_clock::now() + bound;
    while (std::chrono::steady_clock::now() < deadline) {
      bool all = true;
      for (int r : ranks) all = all && output(r).find(line) != std::string::npos;
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  void kill_rank(int r) { ::kill(pids_[size_t(r)], SIGKILL); }
  void kill_all() {
    for (size_t r = 0; r < pids_.size(); ++r)
      if (status_[r] == -1) ::kill(pids_[r], SIGKILL);
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (status_[r] != -1) continue;
      int st = 0;
      ::waitpid(pids_[r], &st, 0);
      status_[r] = st;
    }
  }
  // Exit code of rank r, or 128 + signal.
  int exit_code(int r) const {
    int st = status_[size_t(r)];
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  std::string output(int r) const {
    std::ifstream in(log(r));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::string all_output() const {
    std::string out;
    for (int r = 0; r < world_; ++r) out += "---- rank " + std::to_string(r) + "\n" + output(r);
    return out;
  }

 private:
  std::string log(int r) const { return dir_ + "/rank" + std::to_string(r) + ".log"; }
  void reap() {
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (status_[r] != -1) continue;
      int st = 0;
      if (::waitpid(pids_[r], &st, WNOHANG) == pids_[r]) status_[r] = st;
    }
  }
  int running() const {
    int n = 0;
    for (int s : status_) n += s == -1;
    return n;
  }
  std::string dir_;
  int world_;
  std::vector<pid_t> pids_;
  std::vector<int> status_;  // waitpid status, -1 while running
};

}  // namespace symmflow::testing
