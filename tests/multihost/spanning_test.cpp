// Groups that span simulated hosts (Note [spanning groups] in src/runtime/group.hpp) on the
// threads transport (ThreadsOptions::hosts): every case of the collectives' matrix (cases.hpp)
// on a group whose members run on 2 and 3 hosts (blocks, interleaved, unequal), flat, and
// hierarchical for the all-reduce family, against the same naive references as on one host; the topology a group learns;
// signals and loads refused across hosts; agreement and poisoning across hosts. The same over
// processes (the store transport, SYMMFLOW_HOST_ID) is tests/python/test_multihost.py.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "collectives/cases.hpp"
#include "symmflow/ops/registry.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::testing {
namespace {

struct Layout {
  const char* name;
  std::vector<int> hosts;  // host id of each global rank
};

const Layout kLayouts[] = {
    {"2x2", {0, 0, 1, 1}},
    {"3x2", {0, 0, 1, 1, 2, 2}},
    {"interleaved", {0, 1, 0, 1}},  // hosts by rank parity: host members are not consecutive
    {"unequal", {0, 0, 0, 1}},      // 3 + 1: never hierarchical
};

// Operations that reach other hosts through the exchange: all but the one-sided loads and
// signals (SpanningGroups.SignalsAndLoadsReachOnlyThisHost).
std::vector<Op> spanning_ops() {
  std::vector<Op> out;
  for (Op op : kAllOps)
    if (op != Op::put_wait_signal && op != Op::get) out.push_back(op);
  return out;
}

using Param = std::tuple<Op, int, bool>;  // op, layout, hierarchical from 0 bytes

// Whether `op` has a hierarchical form (kernels::hierarchical_all_reduce: the all-reduce family);
// the other ops run the same code either way, so they are run flat only, as is the unequal
// layout, which is never hierarchical.
bool has_hierarchical_form(Op op) {
  return op == Op::one_shot || op == Op::one_shot_out || op == Op::one_shot_copy ||
         op == Op::one_shot_copy_out || op == Op::two_shot || op == Op::two_shot_out ||
         op == Op::all_reduce;
}

std::vector<Param> spanning_params() {
  std::vector<Param> out;
  for (Op op : spanning_ops()) {
    for (int layout = 0; layout < int(std::size(kLayouts)); ++layout) {
      out.emplace_back(op, layout, false);
      if (has_hierarchical_form(op) && std::string(kLayouts[layout].name) != "unequal")
        out.emplace_back(op, layout, true);
    }
  }
  return out;
}

// The cases of `op`'s matrix a spanning group runs: all of them, but fewer under the sanitizers
// (Note [fewer cases under the sanitizers] in collectives/cases.hpp).
std::vector<Case> spanning_cases(Op op, int world) {
#if defined(SYMMFLOW_ASAN) || defined(SYMMFLOW_TSAN)
  return fewer_cases(case_matrix(op, world));
#else
  return case_matrix(op, world);
#endif
}

class SpanningMatrix : public ::testing::TestWithParam<Param> {};

TEST_P(SpanningMatrix, EveryCaseEqualsTheReference) {
  const auto op = std::get<0>(GetParam());
  const Layout& layout = kLayouts[std::get<1>(GetParam())];
  const bool hierarchical = std::get<2>(GetParam());
  Tunables t = oversubscribed_tunables();
  t.hierarchical_min_bytes = hierarchical ? 0 : int64_t(1) << 40;
  ScopedTunables quick(t);
  Registry::global();
  const int world = int(layout.hosts.size());
  std::vector<Case> cases = spanning_cases(op, world);
  run_threads(world, [&](Runtime& rt) {
    std::vector<int> reversed;
    for (int r = world - 1; r >= 0; --r) reversed.push_back(r);
    rt.new_group("g", reversed);
    ASSERT_TRUE(rt.group("g")->spans_hosts());
    Workspace ws(rt, "g");
    for (const Case& c : cases) run_case(ws, c);
  }, ThreadsOptions{60, layout.hosts});
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string name = op_name(std::get<0>(info.param));
  if (name[0] == '_') name = name.substr(1);
  if (name.back() == '_') name.pop_back();
  return name + "_" + kLayouts[std::get<1>(info.param)].name +
         (std::get<2>(info.param) ? "_hierarchical" : "_flat");
}

INSTANTIATE_TEST_SUITE_P(Multihost, SpanningMatrix, ::testing::ValuesIn(spanning_params()),
                         param_name);

std::vector<std::string> errors_of(int world, std::vector<int> hosts,
                                   const std::function<void(Runtime&)>& fn) {
  Registry::global();
  std::vector<std::string> out;
  for (const std::exception_ptr& e : run_threads_collect(world, fn, ThreadsOptions{5, hosts})) {
    if (!e) {
      out.emplace_back();
      continue;
    }
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      out.emplace_back(x.what());
    }
  }
  return out;
}

TEST(SpanningGroups, KnowTheirHostsAndCrossRanks) {
  for (const std::string& e : errors_of(6, {0, 0, 1, 1, 2, 2}, [](Runtime& rt) {
         const Bootstrap& b = rt.bootstrap();
         EXPECT_EQ(b.host_of(rt.rank()), rt.rank() / 2);
         EXPECT_EQ(b.local_ranks(), 2);
         EXPECT_EQ(b.host_name(5), "host 2 (ThreadsOptions::hosts)");
         Group& w = *rt.group("world");
         EXPECT_TRUE(w.spans_hosts());
         EXPECT_EQ(w.hosts(), 3);
         EXPECT_TRUE(w.uniform());
         EXPECT_EQ(w.host_group().size(), 2);
         EXPECT_EQ(w.host_group().name(), "world@host" + std::to_string(rt.rank() / 2));
         const int l = rt.rank() % 2;
         EXPECT_EQ(w.cross_ranks(), (std::vector<int>{l, 2 + l, 4 + l}));
         // A group inside one host is an ordinary group.
         const int h = rt.rank() / 2;
         Group& tp = *rt.new_group("tp" + std::to_string(h), {2 * h, 2 * h + 1});
         EXPECT_FALSE(tp.spans_hosts());
         EXPECT_EQ(&tp.host_group(), &tp);
       }))
    EXPECT_EQ(e, "");
}

TEST(SpanningGroups, SharedMemoryIsPerHost) {
  for (const std::string& e : errors_of(4, {0, 0, 1, 1}, [](Runtime& rt) {
         Tensor x = empty_symmetric({8}, DType::f32, "world");
         const auto* s = dynamic_cast<const SymmetricStorage*>(x.storage().get());
         ASSERT_NE(s, nullptr);
         for (int p = 0; p < 4; ++p) {
           const bool same_host = p / 2 == rt.rank() / 2;
           EXPECT_EQ(s->heap()->peer(p) != nullptr, same_host) << "peer " << p;
         }
         // Asked of ranks of two hosts, shared memory is refused by the transport, naming both.
         try {
           rt.bootstrap().allocate_shared({0, 1, 2, 3}, "x", 64, "test_alloc");
           ADD_FAILURE() << "allocated across hosts";
         } catch (const Error& err) {
           EXPECT_NE(std::string(err.what()).find(
                         "test_alloc: the ranks of this allocation span several hosts (rank 0 on "
                         "host 0 (ThreadsOptions::hosts), rank 1 on host 0 (ThreadsOptions::hosts), "
                         "rank 2 on host 1"),
                     std::string::npos)
               << err.what();
         }
       }))
    EXPECT_EQ(e, "");
}

TEST(SpanningGroups, SignalsAndLoadsReachOnlyThisHost) {
  for (const std::string& e : errors_of(4, {0, 0, 1, 1}, [](Runtime& rt) {
         const std::string g = "world";
         Tensor dst = empty_symmetric({4}, DType::f32, g);
         Tensor src = Tensor::zeros({4}, DType::f32);
         const int r = rt.rank(), mate = r ^ 1, far = (r + 2) % 4;
         // Same host: works.
         call("symm_mem::put_signal", {src, dst, int64_t(mate), int64_t(0), g});
         call("symm_mem::wait_signal", {dst, int64_t(mate), int64_t(0), g});
         try {
           call("symm_mem::get", {dst, int64_t(far), g, Tensor::zeros({4}, DType::f32)});
           ADD_FAILURE() << "get across hosts";
         } catch (const Error& err) {
           EXPECT_EQ(err.code(), ErrorCode::InvalidUsage);
           EXPECT_NE(std::string(err.what()).find(fmt::format(
                         "symm_mem::get: rank {} of group 'world' runs on host {} "
                         "(ThreadsOptions::hosts) and rank {} on host {}",
                         far, far / 2, r, r / 2)),
                     std::string::npos)
               << err.what();
         }
       }))
    EXPECT_EQ(e, "");
}

// Rank 3 reduces with max, the others with sum. Flat: one exchange, every rank names every
// rank's call. Hierarchical: host 1's barrier finds it (ranks 2 and 3 name their host group's
// calls) and tells the partners on host 0 in the exchange across (fail_across), which name the
// failed rank and its words; no rank waits for the timeout. Then the group stays poisoned.
void check_disagreement(bool hierarchical) {
  Tunables t = tunables();
  t.hierarchical_min_bytes = hierarchical ? 0 : int64_t(1) << 40;
  ScopedTunables mode(t);
  std::vector<std::string> first(4);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::string> errors = errors_of(4, {0, 0, 1, 1}, [&](Runtime& rt) {
    Tensor x = empty_symmetric({16}, DType::f32, "world");
    const std::string reduce = rt.rank() == 3 ? "max" : "sum";
    try {
      call("symm_mem::one_shot_all_reduce", {x, reduce, std::string("world")});
    } catch (const Error& e) {
      first[size_t(rt.rank())] = e.what();
    }
    // Note [poisoned groups]: the next call raises before anything moves.
    call("symm_mem::one_shot_all_reduce", {x, std::string("sum"), std::string("world")});
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 3.0);
  for (int r = 0; r < 4; ++r) {
    const std::string& e = first[size_t(r)];
    if (!hierarchical) {
      EXPECT_NE(e.find("the ranks of group 'world' disagree on reduce op (collective agreement; "
                       "no data was exchanged):\n  reduce op: sum on ranks 0, 1, 2; max on rank 3"),
                std::string::npos)
          << e;
    } else if (r >= 2) {
      EXPECT_NE(e.find("the ranks of group 'world@host1' disagree on reduce op (collective "
                       "agreement; no data was exchanged):\n  reduce op: sum on rank 2; max on "
                       "rank 3"),
                std::string::npos)
          << e;
    } else {
      // Its partner's words, or (by timing) the world's poison from a rank of host 1 that has
      // ended: either names a rank of host 1 and the disagreement.
      EXPECT_TRUE(e.find("rank 2 failed (") != std::string::npos ||
                  e.find("rank 3 failed (") != std::string::npos)
          << e;
      EXPECT_NE(e.find("disagree on reduce op"), std::string::npos) << e;
    }
    EXPECT_NE(errors[size_t(r)].find("group 'world' is poisoned"), std::string::npos)
        << errors[size_t(r)];
  }
}

TEST(SpanningGroups, RanksThatDisagreeAcrossHostsRaiseOnEveryRankFlat) { check_disagreement(false); }
TEST(SpanningGroups, RanksThatDisagreeAcrossHostsRaiseOnEveryRankHierarchical) {
  check_disagreement(true);
}

// Two groups of the same members called in another order per rank (a then b on ranks 0 and 1,
// b then a on ranks 2 and 3): the exchanges of one group never pair with the other's (their
// tag, Bootstrap::exchange); every rank raises, no rank returns a sum of the wrong tensors.
TEST(SpanningGroups, TwoGroupsOfTheSameMembersInAnotherOrderRaise) {
  for (bool hierarchical : {false, true}) {
    Tunables t = tunables();
    t.hierarchical_min_bytes = hierarchical ? 0 : int64_t(1) << 40;
    ScopedTunables mode(t);
    const std::vector<std::string> errors = errors_of(4, {0, 0, 1, 1}, [](Runtime& rt) {
      rt.new_group("a", {0, 1, 2, 3});
      rt.new_group("b", {0, 1, 2, 3});
      Tensor xa = empty_symmetric({16}, DType::f32, "a");
      Tensor xb = empty_symmetric({16}, DType::f32, "b");
      const bool a_first = rt.rank() < 2;
      for (const char* g : {a_first ? "a" : "b", a_first ? "b" : "a"}) {
        Tensor x = std::string(g) == "a" ? xa : xb;
        call("symm_mem::one_shot_all_reduce", {x, std::string("sum"), std::string(g)});
      }
    });
    for (const std::string& e : errors) EXPECT_NE(e, "") << "hierarchical " << hierarchical;
  }
}

TEST(SpanningGroups, ARankThatFailsOnAnotherHostIsNamed) {
  const std::vector<std::string> errors = errors_of(4, {0, 0, 1, 1}, [](Runtime& rt) {
    Tensor x = empty_symmetric({16}, DType::f32, "world");
    if (rt.rank() == 3) throw std::runtime_error("rank 3 gave up");
    call("symm_mem::one_shot_all_reduce", {x, std::string("sum"), std::string("world")});
  });
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(errors[size_t(r)].find("rank 3 failed (rank 3 gave up)"), std::string::npos)
        << errors[size_t(r)];
}

}  // namespace
}  // namespace symmflow::testing
