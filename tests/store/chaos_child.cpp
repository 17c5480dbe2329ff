// The rank side of the chaos tests' process worlds (chaos_shm_test.cpp): `test_store --child
// chaos_<name>`, dispatched by run_child (child.cpp) once the rank joined its world. Exit code 0
// when the scenario went as the rank expected; each prints what the parent asserts on.
//   chaos_alloc   every rank allocates STORE_TEST_BYTES bytes of symmetric memory and prints
//                 "allocated", or "error: <message>" when the allocation raised; with
//                 STORE_TEST_FILL=1 it then writes every byte (a page the heap did not reserve
//                 raises SIGBUS here), passes a barrier and prints "filled"
//   chaos_orphan  rank STORE_TEST_VICTIM (-1: the last) creates a host shared-memory block as
//                 allocate_shared does, prints "block <name>" and sleeps until the parent SIGKILLs
//                 it; the others print "ready", wait for it in an exchange and print its error
//   chaos_create  every rank creates a host shared-memory block (sweeping dead creators' blocks,
//                 Note [store shared memory]) and prints "created <name>"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "child.hpp"
#include "runtime/store/host_memory.hpp"
#include "support/rank_helpers.hpp"
#include "symmflow/runtime/heap.hpp"

namespace symmflow::testing {

namespace {

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

int64_t env_int(const char* name, int64_t otherwise) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoll(v, nullptr, 10) : otherwise;
}

int alloc(Runtime& r) {
  int64_t bytes = env_int("STORE_TEST_BYTES", 4096);
  try {
    Tensor t = empty_symmetric({bytes}, DType::i8, "world");
    say("allocated");
    if (env_int("STORE_TEST_FILL", 0) == 0) return 0;
    std::memset(t.data<int8_t>(), 1, size_t(bytes));
    r.bootstrap().barrier(all_ranks(), "filled", "chaos_alloc");
    say("filled");
  } catch (const Error& e) {
    say(fmt::format("error: {}", e.what()));
  }
  return 0;
}

int orphan(Runtime& r) {
  int victim = int(env_int("STORE_TEST_VICTIM", -1));
  if (victim < 0) victim = r.world_size() - 1;
  if (r.rank() == victim) {
    HostBlock block = HostBlock::create(1 << 16);
    say("block " + block.name());
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 3;  // never reached: the parent kills it
  }
  say("ready");
  try {
    r.bootstrap().barrier(all_ranks(), "orphan", "chaos_orphan");
    say("no error");
    return 1;
  } catch (const Error& e) {
    say(fmt::format("code: {}", error_code_name(e.code())));
    say(fmt::format("message: {}", e.what()));
    return 0;
  }
}

}  // namespace

int run_chaos_child(const std::string& scenario, Runtime& r) {
  if (scenario == "chaos_alloc") return alloc(r);
  if (scenario == "chaos_orphan") return orphan(r);
  if (scenario == "chaos_create") {
    HostBlock block = HostBlock::create(4096);
    say("created " + block.name());
    return 0;
  }
  say("unknown scenario " + scenario);
  return 2;
}

}  // namespace symmflow::testing
