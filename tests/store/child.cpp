// The rank side of the process tests (process_test.cpp): `test_store --child <scenario>` joins the
// world named by the environment (init_store_from_env) and runs one scenario, printing what the
// parent asserts on. Exit code 0 when the scenario went as the rank expected.
//   matrix    every symm_mem collective case of tests/collectives/cases.hpp on a reduced matrix
//   kill      rank STORE_TEST_VICTIM (-1: the last) prints "ready" and sleeps (the parent SIGKILLs
//             it); the others enter an all-reduce and print how long it took to fail and the error
//   throw     the last rank dies of an uncaught exception (std::terminate); the others wait for it
//             in an all-reduce and print the error
//   mismatch  rank 1 allocates another size than the others, through the heap and through the
//             bootstrap directly; every rank prints both errors
//   agreement every process compiles the same program and runs it twice (rank agreement: one
//             exchange at construction, one at the first run), then the first run of a second
//             Executable where rank 1 binds bf16[8, 8] and the others f32[8, 4]; every rank prints
//             the results and the error
//   finished  rank 1 leaves the world cleanly (shutdown_store) after a barrier; rank 0 then waits
//             for it in a bootstrap barrier and prints how long it took to fail and the error
//   shutdown  every rank leaves the world early with shutdown_store (as the Python package does
//             before the interpreter exits), calls it again (a no-op), and prints what a later
//             init_store, all-reduce, barrier, allocation and new_group raise
//   agreement_off  rank 1 turns collective agreement off, the others keep it; every rank prints
//             the error of an all-reduce
//   fork      rank 0 forks a child that exits normally and one that dies of an uncaught exception;
//             the world's next all-reduce is still right (Note [forked children])
//   members   ranks 0 and 1 compile and run a program of their own before ranks 2 and 3 join the
//             world at all; then a world all-reduce (Note [groups of members only])
//   multihost the ranks on simulated hosts (SYMMFLOW_HOST_ID): every spanning collective case and
//             a TP x DP program against the interpreter (multihost_test.cpp)
//   chaos_*   the chaos tests' scenarios (chaos_child.cpp)
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "child.hpp"
#include "collectives/cases.hpp"
#include "support/rank_helpers.hpp"
#include "symmflow/exec/compare.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/interpret.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/ops/registry.hpp"
#include "symmflow/passes/pipeline.hpp"

namespace symmflow::testing {

namespace {

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

std::vector<Case> reduced_matrix(Op op, int world) {
  std::vector<Case> out;
  for (const Case& c : case_matrix(op, world)) {
    bool dtype = c.dtype == DType::f32 || c.dtype == DType::bf16 || c.dtype == DType::i64;
    bool rop = c.reduce_op == "sum" || c.reduce_op == "max";
    if (dtype && rop) out.push_back(c);  // sizes 0, 1, 7, 1023, 4099 and 1 MiB per rank
  }
  return out;
}

int matrix(Runtime& r) {
  ScopedTunables quick(oversubscribed_tunables());
  Registry::global();
  std::vector<int> reversed = all_ranks();
  std::reverse(reversed.begin(), reversed.end());
  size_t cases = 0;
  std::exception_ptr err = run_rank([&] {
    for (Op op : kAllOps) {
      std::string name = fresh_group(std::string("coll_") + op_name(op) + "_", reversed);
      Workspace ws(r, name);
      for (const Case& c : reduced_matrix(op, r.world_size())) {
        run_case(ws, c);
        ++cases;
      }
    }
  });
  if (err) {
    say("rank " + std::to_string(r.rank()) + ": " + message_of(err));
    return 1;
  }
  say(fmt::format("matrix ok: {} cases", cases));
  return 0;
}

// Runs `fn`, which must raise: prints the error's code, how long it took and its message (what the
// parent asserts on) and returns 0; prints "no error" and returns 1 when it did not raise.
template <typename F>
int expect_error(F&& fn) {
  auto start = std::chrono::steady_clock::now();
  try {
    fn();
  } catch (const Error& e) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    say(fmt::format("code: {}", error_code_name(e.code())));
    say(fmt::format("elapsed: {:.3f}", s));
    say(fmt::format("message: {}", e.what()));
    return 0;
  }
  say("no error");
  return 1;
}

int kill_victim(Runtime& r) {
  const char* chosen = std::getenv("STORE_TEST_VICTIM");
  int victim = chosen ? std::atoi(chosen) : -1;
  if (victim < 0) victim = r.world_size() - 1;
  Tensor x = empty_symmetric({1024}, DType::f32, "world");
  say("ready");
  if (r.rank() == victim) {
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 3;  // never reached: the parent kills it
  }
  return expect_error([&] { call("symm_mem::one_shot_all_reduce", {x, "sum", "world"}); });
}

// `staged` (3 ranks): rank 1 calls at once, waits for rank 0 first (Group::signed_barrier) and
// checks the world's poison once per 5 s; rank 2 throws 100 ms later; rank 0 checks every
// millisecond and calls after 300 ms, so it sees the poison at its call, raises and finishes
// while rank 1 still waits for it, inside rank 1's rate limit (Note [the cause before the
// departure] in wait.cpp).
int throw_uncaught(Runtime& r, bool staged) {
  int thrower = r.world_size() - 1;
  Tensor x = empty_symmetric({16}, DType::f32, "world");
  auto pause = [&](int ms) {
    if (staged) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  };
  if (r.rank() == thrower) {
    pause(100);
    throw std::runtime_error("boom");  // not caught: std::terminate
  }
  if (r.rank() == 0) pause(300);
  try {
    call("symm_mem::one_shot_all_reduce", {x, "sum", "world"});
    say("no error");
    return 1;
  } catch (const Error& e) {
    say(fmt::format("code: {}", error_code_name(e.code())));
    say(fmt::format("message: {}", e.what()));
    return 0;
  }
}

int mismatch(Runtime& r) {
  int status = 0;
  try {
    empty_symmetric({r.rank() == 1 ? 8 : 4}, DType::f32, "world");
    say("heap: no error");
    status = 1;
  } catch (const Error& e) {
    say(fmt::format("heap: {}", e.what()));
  }
  try {
    r.bootstrap().allocate_shared(all_ranks(), "direct", r.rank() == 1 ? 128 : 64, "test_alloc");
    say("bootstrap: no error");
    status = 1;
  } catch (const Error& e) {
    say(fmt::format("bootstrap: {}", e.what()));
  }
  // The world is still usable after a refused allocation.
  r.bootstrap().barrier(all_ranks(), "after", "test_after");
  say("after: ok");
  return status;
}

const char* kAgreementProgram = R"sf(group tp
graph agree(x: f32[8, 4]) {
  r = symm_mem::one_shot_all_reduce(x, "sum", "tp")
  return r
}
)sf";

int agreement(Runtime& r) {
  ir::ParseOptions o;
  o.filename = "agree.sf";
  o.world_size = r.world_size();
  auto plan = passes::compile(ir::parse_graph(kAgreementProgram, o));
  exec::Executable exe(plan);
  Tensor x = Tensor::full({8, 4}, DType::f32, 1.0);
  float first = exe.run({x})[0].data<float>()[0];
  float second = exe.run({x})[0].data<float>()[0];
  say(fmt::format("runs: {} {}, exchanges {}", first, second, exe.agreement_exchanges()));
  exec::Executable fresh(plan);  // its first run exchanges on every rank
  Tensor mine = r.rank() == 1 ? Tensor::full({8, 8}, DType::bf16, 1.0) : x;
  try {
    fresh.run({mine});
    say("agreement: no error");
    return 1;
  } catch (const Error& e) {
    say(fmt::format("agreement: {}", e.what()));
  }
  return 0;
}

// Issue 39 item 9: rank 1 runs with collective agreement off (SYMMFLOW_COLLECTIVE_AGREEMENT=0 in
// its environment, set here in its own process), the others with it on; the same all-reduce then
// raises on every rank naming that difference, not another op.
int agreement_off(Runtime& r) {
  if (r.rank() == 1) {
    Tunables t = tunables();
    t.collective_agreement = false;
    set_tunables(t);
  }
  Tensor x = empty_symmetric({8}, DType::f32, "world");
  return expect_error([&] { call("symm_mem::one_shot_all_reduce", {x, "sum", "world"}); });
}

int finished(Runtime& r) {
  r.bootstrap().barrier(all_ranks(), "both", "test_both");
  if (r.rank() != 0) {
    shutdown_store();  // leaves cleanly: sets its exit key
    say("left");
    return 0;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return expect_error([&] { r.bootstrap().barrier(all_ranks(), "late", "test_late"); });
}

// Runs fn, which must raise; prints "<what>: <message>" (or "<what>: no error").
template <typename F>
int expect_refused(const std::string& what, F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    say(fmt::format("{}: {}", what, e.what()));
    return 0;
  }
  say(what + ": no error");
  return 1;
}

int shutdown(Runtime& r) {
  std::shared_ptr<Group> world = r.group("world");
  Tensor x = empty_symmetric({16}, DType::f32, "world");
  world->barrier(0, "before shutdown");
  shutdown_store();
  shutdown_store();  // nothing left: a no-op
  // Handles made before it raise (Note [use after shutdown]), they do not crash.
  int status = expect_refused("init_store", [] { init_store_from_env(); });
  status |= expect_refused("all_reduce", [&] {
    call("symm_mem::one_shot_all_reduce", {x, "sum", "world"});
  });
  status |= expect_refused("barrier", [&] { world->barrier(0, "after shutdown"); });
  status |= expect_refused("empty_symmetric", [] {
    empty_symmetric({4}, DType::f32, "world");
  });
  status |= expect_refused("new_group", [&] { r.new_group("late", all_ranks()); });
  r.abort("after shutdown");  // a no-op: it left already
  return status;
}

// Note [forked children] in store_bootstrap.cpp: rank 0 forks two children, one that returns
// normally through exit() (the atexit handlers run) and one that dies of an uncaught exception
// (std::terminate). Neither speaks for rank 0: the world then runs an all-reduce, correctly.
int forked(Runtime& r) {
  Tensor x = empty_symmetric({16}, DType::f32, "world");
  r.group("world")->barrier(0, "before fork");
  if (r.rank() == 0) {
    for (bool uncaught : {false, true}) {
      pid_t pid = ::fork();
      if (pid == 0) {
        // std::terminate through the inherited handler, as an uncaught exception would.
        if (uncaught) {
          try {
            throw std::runtime_error("boom in a forked child");
          } catch (...) {
            std::terminate();
          }
        }
        std::exit(0);
      }
      int status = 0;
      ::waitpid(pid, &status, 0);
      say(fmt::format("child {}: {}", uncaught ? "uncaught" : "exit",
                      WIFEXITED(status) ? "exited" : "signalled"));
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // past a store check
  for (int i = 0; i < 16; ++i) x.data<float>()[i] = float(r.rank() + 1);
  Tensor sum = call("symm_mem::one_shot_all_reduce", {x, "sum", "world"}).to_tensor();
  const float want = float(r.world_size() * (r.world_size() + 1) / 2);
  for (int i = 0; i < 16; ++i) {
    if (sum.data<float>()[i] != want) {
      say(fmt::format("forked: element {} is {}, not {}", i, sum.data<float>()[i], want));
      return 1;
    }
  }
  r.group("world")->barrier(0, "after fork");
  say("forked: ok");
  return 0;
}

}  // namespace

// Issue 38 (Note [spanning groups]): the ranks run on simulated hosts (SYMMFLOW_HOST_ID, two
// ranks each). Every spanning collective case on a group of all ranks (hierarchical from 4 KiB;
// with `every_op` false the all-reduce family and the all-gather only: the file store's polling
// makes each case slow, and its exchange is the same code as TCP's), then a TP x DP program (tp
// inside each host, dp across them) compiled and run against the interpreter.
int multihost(Runtime& r, bool every_op) {
  Tunables t = oversubscribed_tunables();
  t.hierarchical_min_bytes = 4096;
  ScopedTunables quick(t);
  Registry::global();
  const int w = r.world_size();
  say(fmt::format("rank {} on {} ({} hosts)", r.rank(), r.bootstrap().host_name(r.rank()),
                  r.group("world")->hosts()));
  std::vector<int> reversed = all_ranks();
  std::reverse(reversed.begin(), reversed.end());
  size_t cases = 0;
  std::string tp = "group tp = ", dp = "group dp = ";
  for (int h = 0; h < w / 2; ++h) tp += fmt::format("{}{{{}, {}}}", h ? ", " : "", 2 * h, 2 * h + 1);
  for (int l = 0; l < 2; ++l) {
    dp += l ? ", {" : "{";
    for (int h = 0; h < w / 2; ++h) dp += fmt::format("{}{}", h ? ", " : "", 2 * h + l);
    dp += "}";
  }
  const std::string program = tp + "\n" + dp + R"(
graph tp_dp(x: f32[16, 64], w: f32[64, 64], grad: f32[64, 64]) {
  h = aten::mm(x, w)
  y = symm_mem::one_shot_all_reduce(h, "sum", "tp")
  g = symm_mem::one_shot_all_reduce(grad, "avg", "dp")
  z = aten::mm(y, g)
  return y, z
}
)";
  std::exception_ptr err = run_rank([&] {
    for (Op op : kAllOps) {
      if (op == Op::put_wait_signal || op == Op::get) continue;  // this host only
      if (!every_op && op != Op::one_shot && op != Op::two_shot && op != Op::all_gather_out)
        continue;
      std::string name = fresh_group(std::string("span_") + op_name(op) + "_", reversed);
      SF_CHECK(r.group(name)->spans_hosts(), "group {} does not span hosts", name);
      Workspace ws(r, name);
      for (const Case& c : reduced_matrix(op, w)) {
        run_case(ws, c);
        ++cases;
      }
    }
    ir::ParseOptions o;
    o.filename = "tp_dp.sf";
    o.world_size = w;
    std::shared_ptr<const ir::Graph> source = ir::parse_graph(program, o);
    exec::Executable exe(passes::compile(ir::parse_graph(program, o)));
    std::vector<Tensor> inputs;
    uint64_t seed = 1000 + uint64_t(r.rank());
    for (const ir::Value* v : source->inputs()) {
      Tensor in = Tensor::uninitialized(v->type().shape, DType::f32);
      for (int64_t i = 0; i < in.numel(); ++i)
        in.data<float>()[i] = float(int64_t(++seed * 2654435761u % 17) - 8) / 8.0f;
      inputs.push_back(in);
    }
    std::vector<Tensor> want = exec::interpret(*source, inputs);
    std::vector<Tensor> got = exe.run(inputs);
    for (size_t i = 0; i < want.size(); ++i) {
      exec::Comparison c = exec::compare(got[i], want[i], exec::check_tolerance(DType::f32, 4),
                                         fmt::format("tp_dp output {}", i));
      SF_CHECK(!c.mismatch, "{}", *c.mismatch);
    }
  });
  if (err) {
    say("rank " + std::to_string(r.rank()) + ": " + message_of(err));
    return 1;
  }
  say(fmt::format("multihost ok: {} cases, tp_dp equal", cases));
  return 0;
}

// Issue 38 item 5 (Note [groups of members only]): ranks 0 and 1 of a 4-rank world make a group
// of their own, compile a program on it and run it against the interpreter, then write
// STORE_TEST_DIR/pair_done; ranks 2 and 3 have not joined the world until that file exists (they
// never called symmflow). Then every rank all-reduces over the world.
int members() {
  const std::string done = std::string(std::getenv("STORE_TEST_DIR")) + "/pair_done";
  const int rank = std::atoi(std::getenv("RANK"));
  if (rank >= 2) {
    for (int i = 0; i < 600 && ::access(done.c_str(), F_OK) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (::access(done.c_str(), F_OK) != 0) {
      say("the pair never finished");
      return 1;
    }
  }
  Runtime& r = init_store_from_env();
  Registry::global();
  std::exception_ptr err = run_rank([&] {
    if (rank < 2) {
      ir::ParseOptions o;
      o.filename = "pair.sf";
      o.world_size = r.world_size();
      // SPMD: ranks 2 and 3 would run it in {2, 3}; here only ranks 0 and 1 do.
      const std::string program = R"(group pair = {0, 1}, {2, 3}
graph pair_sum(x: f32[8, 16]) {
  y = symm_mem::one_shot_all_reduce(x, "sum", "pair")
  return y
}
)";
      std::shared_ptr<const ir::Graph> source = ir::parse_graph(program, o);
      exec::Executable exe(passes::compile(ir::parse_graph(program, o)));
      Tensor x = Tensor::full({8, 16}, DType::f32, double(rank + 1));
      Tensor got = exe.run({x})[0];
      for (int64_t i = 0; i < got.numel(); ++i)
        SF_CHECK(got.data<float>()[i] == 3.0f, "pair: element {} is {}", i, got.data<float>()[i]);
      say("pair ok");
      if (rank == 0) {
        FILE* f = std::fopen(done.c_str(), "w");
        if (f) std::fclose(f);
      }
    }
    Tensor w = empty_symmetric({4}, DType::f32, "world");
    for (int i = 0; i < 4; ++i) w.data<float>()[i] = float(rank);
    Tensor sum = call("symm_mem::one_shot_all_reduce", {w, "sum", "world"}).to_tensor();
    SF_CHECK(sum.data<float>()[0] == 6.0f, "world: {}", sum.data<float>()[0]);
    say("world ok");
  });
  if (err) {
    say("rank " + std::to_string(rank) + ": " + message_of(err));
    return 1;
  }
  return 0;
}

int run_child(const std::string& scenario) {
  if (scenario == "throw_staged")
    ::setenv("SYMMFLOW_STORE_CHECK_MS", std::getenv("RANK") == std::string("1") ? "5000" : "1", 1);
  if (scenario == "throw" || scenario == "throw_staged")  // nothing catches
    return throw_uncaught(init_store_from_env(), scenario == "throw_staged");
  if (scenario == "members") return members();  // joins late on some ranks
  try {
    Runtime& r = init_store_from_env();
    if (scenario == "matrix") return matrix(r);
    if (scenario == "multihost") return multihost(r, true);
    if (scenario == "multihost_some") return multihost(r, false);
    if (scenario == "kill") return kill_victim(r);
    if (scenario == "mismatch") return mismatch(r);
    if (scenario == "agreement") return agreement(r);
    if (scenario == "shutdown") return shutdown(r);
    if (scenario == "finished") return finished(r);
    if (scenario == "fork") return forked(r);
    if (scenario == "agreement_off") return agreement_off(r);
    if (scenario.rfind("chaos_", 0) == 0) return run_chaos_child(scenario, r);
    say("unknown scenario " + scenario);
    return 2;
  } catch (const std::exception& e) {
    say(std::string("child error: ") + e.what());
    return 1;
  }
}

}  // namespace symmflow::testing
