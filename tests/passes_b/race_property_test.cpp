// The property test of check_races (issue 16, item 1): generated ring exchanges over one group,
// with put_signal / wait_signal into a shared inbox or a fresh one per round, collective_permute
// rounds, all-reduces, barriers and credit signals. Each program is correct or racy by
// construction:
//   - correct: every round that puts into the shared inbox after its owner read it is ordered
//     after that read by a barrier, a collective (all-reduce, permute round) or a credit (the
//     owner signals the writer after reading; the writer waits for it before its put);
//   - racy: one such round has none (the order dropped), or its credit's wait is dropped.
// check_races must reject every racy program and accept every correct one; each accepted one is
// compiled once and run 3 times on threads, and every run gives the same bits on every rank.
// 600 programs (world sizes 2 to 4, 2 to 4 rounds); SYMMFLOW_RACE_PROGRAMS changes the count,
// SYMMFLOW_RACE_DUMP=1 prints each program and the checker's first finding.
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/tensors.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/passes/check_races.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow {
namespace {

enum class Order { barrier, collective, credit, dropped, credit_wait_dropped };

struct RingProgram {
  std::string text;
  int world = 2;
  bool racy = false;
};

// Builds one program; see the contract above.
class RingGenerator {
 public:
  explicit RingGenerator(uint64_t seed) : rng_(seed) {}

  RingProgram make(bool racy) {
    RingProgram p;
    p.world = 2 + int(pick(3));
    p.racy = racy;
    shift_ = 1 + int(pick(size_t(p.world - 1)));
    int rounds = 2 + int(pick(3));
    // Rounds that reuse the read shared inbox need an order; a racy program drops one.
    lines_ = {"group ring", "graph ring(x: f32[4, 4]) {",
              "  c0 = aten::mul.Scalar(x, 1.0)",
              "  inbox = aten::empty.memory_format([4, 4], dtype=f32)",
              "  credit = aten::empty.memory_format([4, 4], dtype=f32)"};
    cur_ = "c0";
    dirty_ = false;
    bool dropped = false, last_shared = false;
    for (int k = 0; k < rounds; ++k) {
      int kind = int(pick(4));  // 0, 1: shared inbox; 2: fresh inbox; 3: permute
      bool shared = kind <= 1;
      if (shared && dirty_) {
        // Dropped only right after the read: put rounds in between could order it around the
        // ring (signals flow from rank r to r+shift), and the program would not be racy.
        bool drop_here = racy && !dropped && last_shared && (k == rounds - 1 || chance(0.5));
        Order o = drop_here ? (chance(0.5) ? Order::dropped : Order::credit_wait_dropped)
                            : std::array<Order, 3>{Order::barrier, Order::collective,
                                                   Order::credit}[pick(3)];
        dropped |= drop_here;
        order(o);
      } else if (shared && chance(0.3)) {
        order(Order::barrier);
      }
      last_shared = shared;
      if (kind == 3) {
        permute_round(k);
      } else {
        put_round(k, shared ? std::string("inbox") : fresh("box", k));
      }
    }
    if (racy && !dropped) {  // no round was dropped: read the inbox, then put without an order
      if (!last_shared || !dirty_) put_round(rounds, "inbox");
      order(chance(0.5) ? Order::dropped : Order::credit_wait_dropped);
      put_round(rounds + 1, "inbox");
    }
    lines_.push_back(fmt::format("  return {}", cur_));
    lines_.push_back("}");
    for (const std::string& l : lines_) p.text += l + "\n";
    return p;
  }

 private:
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  std::string fresh(const char* stem, int k) { return fmt::format("{}{}_{}", stem, k, n_++); }
  void emit(std::string line) { lines_.push_back("  " + std::move(line)); }

  // Orders the owner's read of the shared inbox before the next put into it (or fails to).
  void order(Order o) {
    switch (o) {
      case Order::barrier:
        emit("symm_mem::barrier(\"ring\")");
        break;
      case Order::collective: {
        std::string v = fresh("r", 0);
        emit(fmt::format("{} = symm_mem::one_shot_all_reduce({}, \"max\", \"ring\")", v, cur_));
        cur_ = v;
        break;
      }
      case Order::credit:
      case Order::credit_wait_dropped: {
        std::string ack = fresh("ack", 0);
        emit(fmt::format("{} = aten::mul.Scalar({}, 0.0)", ack, cur_));
        emit(fmt::format("symm_mem::put_signal({}, credit, rank-{}, 1, \"ring\")", ack, shift_));
        if (o == Order::credit)
          emit(fmt::format("symm_mem::wait_signal(credit, rank+{}, 1, \"ring\")", shift_));
        break;
      }
      case Order::dropped:
        break;
    }
    if (o == Order::barrier || o == Order::collective) dirty_ = false;
    if (o == Order::credit) dirty_ = false;
  }

  void put_round(int k, const std::string& box) {
    if (box != "inbox") emit(fmt::format("{} = aten::empty.memory_format([4, 4], dtype=f32)", box));
    emit(fmt::format("symm_mem::put_signal({}, {}, rank+{}, 0, \"ring\")", cur_, box, shift_));
    emit(fmt::format("symm_mem::wait_signal({}, rank-{}, 0, \"ring\")", box, shift_));
    std::string v = fresh("c", k + 1);
    emit(fmt::format("{} = aten::add.Tensor({}, {})", v, box, cur_));
    std::string w = fresh("c", k + 1);
    emit(fmt::format("{} = aten::mul.Scalar({}, 0.5)", w, v));
    cur_ = w;
    if (box == "inbox") dirty_ = true;
  }

  void permute_round(int k) {
    std::string v = fresh("p", k + 1);
    emit(fmt::format("{} = symm_mem::collective_permute({}, {}, \"ring\")", v, cur_, shift_));
    std::string w = fresh("c", k + 1);
    emit(fmt::format("{} = aten::sub.Tensor({}, {})", w, v, cur_));
    cur_ = w;
    dirty_ = false;  // a collective orders everything before it
  }

  std::mt19937_64 rng_;
  std::vector<std::string> lines_;
  std::string cur_;
  int shift_ = 1;
  int n_ = 0;
  bool dirty_ = false;  // the shared inbox was read since the last order
};

int program_count() {
  const char* env = std::getenv("SYMMFLOW_RACE_PROGRAMS");
  return env ? std::atoi(env) : 600;
}

// Compiles once; runs 3 times on `world` threads; every run's output equals the first, per rank.
void expect_repeatable(const RingProgram& p, uint64_t seed) {
  auto plan = passes::compile(ir::parse_graph(p.text, {"<ring>", p.world}));
  std::vector<std::string> problems(size_t(p.world));
  ThreadsOptions threads;
  threads.timeout_s = 20;
  run_threads(
      p.world,
      [&](Runtime& rt) {
        const int rank = rt.rank();
        Tensor x = testing::make_input({4, 4}, DType::f32, rank, int(seed % 1000));
        exec::Executable exe(plan);
        Tensor first = testing::clone_tensor(exe.run({x}).at(0));
        for (int run = 1; run < 3; ++run) {
          if (!testing::bitwise_equal(exe.run({x}).at(0), first))
            problems[size_t(rank)] = fmt::format("rank {}: run {} differs from run 0", rank, run);
        }
      },
      threads);
  for (const std::string& s : problems) EXPECT_EQ(s, "") << p.text;
}

TEST(RaceProperty, RejectsRacyAcceptsCorrectAndCorrectRunsRepeat) {
  int racy = 0, correct = 0;
  for (int i = 0; i < program_count(); ++i) {
    const uint64_t seed = 1000 + uint64_t(i);
    RingProgram p = RingGenerator(seed).make(i % 2 == 1);
    SCOPED_TRACE(fmt::format("program {} (world {}, {}):\n{}", seed, p.world,
                             p.racy ? "racy" : "correct", p.text));
    auto g = ir::parse_graph(p.text, {"<ring>", p.world});
    passes::CompileOptions unchecked;
    unchecked.race_check = false;
    auto plan = passes::compile(std::move(g), unchecked);
    std::vector<ir::Diagnostic> found = passes::find_races(*plan->graph);
    if (std::getenv("SYMMFLOW_RACE_DUMP"))  // for debugging the generator
      std::printf("%s-> %s\n", p.text.c_str(),
                  found.empty() ? "accepted" : found[0].message.c_str());
    if (p.racy) {
      ++racy;
      EXPECT_FALSE(found.empty()) << "a racy program was accepted";
      continue;
    }
    ++correct;
    ASSERT_TRUE(found.empty()) << "a correct program was rejected: " << found.front().message;
    expect_repeatable(p, seed);
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GE(racy + correct, program_count());
  std::printf("race property: %d racy programs rejected, %d correct ones accepted and repeated\n",
              racy, correct);
}

// compile() itself refuses a racy program, with the race named; the option turns it off.
TEST(RaceProperty, CompileRefusesUnlessTurnedOff) {
  RingProgram p;
  for (uint64_t seed = 1;; ++seed) {
    p = RingGenerator(seed).make(true);
    if (p.world == 2) break;
  }
  try {
    passes::compile(ir::parse_graph(p.text, {"<ring>", p.world}));
    FAIL() << "compiled a racy program:\n" << p.text;
  } catch (const ir::DiagnosticError& e) {
    EXPECT_NE(std::string(e.what()).find("error: "), std::string::npos) << e.what();
  }
  passes::CompileOptions off;
  off.race_check = false;
  EXPECT_NO_THROW(passes::compile(ir::parse_graph(p.text, {"<ring>", p.world}), off));
}

}  // namespace
}  // namespace symmflow
