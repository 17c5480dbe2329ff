// The end-to-end property test of the compiler (issue 4, item 6): random programs
// (random_program.hpp) on 2..4 thread ranks, each compiled through the full pipeline and run by
// exec::Executable, and checked against exec::interpret of the source graph:
//   - every output and every caller input (writebacks) bitwise equal to the eager result, on a
//     first and a second run of one Executable (pools and heaps reused, inputs written into
//     Executable::input_handle: staged symm inputs bound with no copy);
//   - the plan: no two simultaneously live buffers of a pool overlap, each pool's peak >= its
//     lower bound (plan_checks.hpp, live ranges recomputed from the graph);
//   - the compiled IR prints and parses back to itself;
//   - the same communication sequence on every rank: in the plans, and at run time (every
//     collective fingerprinted across ranks with tunables().debug_collectives);
//   - every op kind and feature of the generator exercised at least kMinCoverage times per 500
//     programs. The peak / lower-bound ratio over all pools is printed (median, p90, p99, worst).
// SYMMFLOW_E2E_SEED (default 1) and SYMMFLOW_E2E_PROGRAMS (default 500, 100 under sanitizers)
// choose the programs; program i has seed SEED + i and world size 2 + (seed % 3), so one failing
// program reruns alone with SYMMFLOW_E2E_SEED=<its seed> SYMMFLOW_E2E_PROGRAMS=1. The first
// SYMMFLOW_E2E_SHOW (default 5) failing programs are printed with their source graph;
// SYMMFLOW_E2E_OPS (default 18) scales the programs (ops / 2 .. ops * 3 / 2 operations).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "e2e/plan_checks.hpp"
#include "e2e/random_program.hpp"
#include "support/tensors.hpp"
#include "symmflow/exec/executable.hpp"
#include "symmflow/exec/interpret.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/runtime/runtime.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::e2e {
namespace {

#ifdef SYMMFLOW_E2E_SANITIZED
constexpr int kDefaultPrograms = 100;
#else
constexpr int kDefaultPrograms = 500;
#endif
constexpr int kMinCoverage = 25;  // per 500 programs

// What the generator must exercise (op kinds as it counts them, and features).
const char* const kRequired[] = {"dtype f32",
                                 "dtype f64",
                                 "dtype bf16",
                                 "dtype f16",
                                 "aten::mm",
                                 "pointwise",
                                 "aten::mul.Scalar",
                                 "aten::add.Scalar",
                                 "aten::t",
                                 "aten::transpose.int",
                                 "aten::slice.Tensor",
                                 "aten::view",
                                 "aten::reshape",
                                 "noncontiguous_view",
                                 "inplace",
                                 "aten::copy_",
                                 "aten::cos.out",
                                 "write_graph_input",
                                 "subgroup",
                                 "symm_arg_graph_input",
                                 "symm_arg_view",
                                 "symm_arg_noncontiguous",
                                 "symm_mem::one_shot_all_reduce",
                                 "symm_mem::one_shot_all_reduce_out",
                                 "symm_mem::one_shot_all_reduce_copy",
                                 "symm_mem::one_shot_all_reduce_copy_out",
                                 "symm_mem::two_shot_all_reduce_",
                                 "symm_mem::two_shot_all_reduce_out",
                                 "symm_mem::reduce_scatter_out",
                                 "symm_mem::_low_contention_reduce_scatter",
                                 "symm_mem::all_gather_out",
                                 "symm_mem::_low_contention_all_gather",
                                 "symm_mem::collective_permute",
                                 "symm_mem::collective_permute_out",
                                 "symm_mem::put_signal",
                                 "symm_mem::wait_signal",
                                 "symm_mem::get",
                                 "symm_mem::broadcast_",
                                 "symm_mem::barrier",
                                 "symm_mem::all_to_all_vdev"};

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* s = std::getenv(name);
  return s && *s ? std::strtoull(s, nullptr, 10) : fallback;
}

int ops() {
  return int(env_u64("SYMMFLOW_E2E_OPS", 18));
}

Tensor random_input(const ir::TensorType& type, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> d(-16, 16);
  Tensor t = Tensor::empty(type.shape, type.dtype);
  for (int64_t i = 0; i < t.numel(); ++i) store_double(t.view(), i, double(d(rng)) / 8);
  return t;
}

using testing::bitwise_equal;
using testing::clone_tensor;

struct RankResult {
  std::vector<std::string> comm;
  std::vector<std::string> mismatches;
};

struct Totals {
  std::map<std::string, int> features;
  std::vector<PoolRatio> ratios;
};

// Runs program `seed`; returns its problems (empty: passed).
std::vector<std::string> check_program(uint64_t seed, Totals& totals) {
  const int world = 2 + int(seed % 3);
  std::vector<RankResult> results(static_cast<size_t>(world));
  std::shared_ptr<const passes::Plan> plan0;
  std::map<std::string, int> features;
  ThreadsOptions threads;
  threads.timeout_s = 20;
  auto errors = run_threads_collect(
      world,
      [&](Runtime& rt) {
        const int rank = rt.rank();
        RankResult& res = results[size_t(rank)];
        Program source = random_program({seed, world, rank, ops()});
        auto plan = passes::compile(random_program({seed, world, rank, ops()}).graph);
        res.comm = comm_sequence(*plan);
        if (rank == 0) {
          plan0 = plan;
          features = source.features;
        }
        std::vector<Tensor> data;
        for (const ir::Value* v : source.graph->inputs())
          data.push_back(random_input(v->type(), seed * 1000 + uint64_t(rank) * 100 + data.size()));
        std::vector<Tensor> eager_in, run_in;
        for (const Tensor& t : data) {
          eager_in.push_back(clone_tensor(t));
          run_in.push_back(clone_tensor(t));
        }
        std::vector<Tensor> want = exec::interpret(*source.graph, eager_in);
        exec::Executable exe(plan);
        for (int run = 0; run < 2; ++run) {  // the second run reuses the pools and heaps
          for (size_t i = 0; run == 1 && i < data.size(); ++i) {  // zero-copy binding
            run_in[i] = exe.input_handle(i);
            std::memcpy(run_in[i].raw_data(), data[i].raw_data(), data[i].nbytes());
          }
          std::vector<Tensor> got = exe.run(run_in);
          for (size_t i = 0; i < want.size(); ++i) {
            if (!bitwise_equal(got.at(i), want[i]))
              res.mismatches.push_back(
                  fmt::format("rank {} run {}: output {} ('{}') differs from eager", rank, run, i,
                              plan->graph->outputs()[i]->name()));
          }
          for (size_t i = 0; i < data.size(); ++i) {
            if (!bitwise_equal(run_in[i], eager_in[i]))
              res.mismatches.push_back(
                  fmt::format("rank {} run {}: input '{}' after the run differs from eager", rank,
                              run, source.graph->inputs()[i]->name()));
          }
        }
      },
      threads);
  std::vector<std::string> problems;
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      problems.push_back(fmt::format("rank {} threw: {}", r, e.what()));
    }
    break;  // the first rank's error; peers fail with PeerFailure
  }
  for (const RankResult& r : results)
    problems.insert(problems.end(), r.mismatches.begin(), r.mismatches.end());
  for (size_t r = 1; r < results.size() && problems.empty(); ++r) {
    if (results[r].comm != results[0].comm)
      problems.push_back(fmt::format("rank {} communicates [{}] but rank 0 [{}]", r,
                                     fmt::join(results[r].comm, "; "),
                                     fmt::join(results[0].comm, "; ")));
  }
  if (plan0) {
    std::vector<std::string> p = check_plan(*plan0, &totals.ratios);
    problems.insert(problems.end(), p.begin(), p.end());
    std::string printed = ir::print_graph(*plan0->graph);  // the compiled IR is a fixed point
    try {
      if (ir::print_graph(*ir::parse_graph(printed, {"<compiled>", world})) != printed)
        problems.push_back("the compiled IR does not print back the same:\n" + printed);
    } catch (const std::exception& e) {
      problems.push_back(std::string("the compiled IR does not parse: ") + e.what() + "\n" +
                         printed);
    }
    for (const passes::PlanStep& step : plan0->steps) {
      const ir::Node* n = step.node;
      if (n->kind() == ir::NodeKind::fused) ++features["compiled: fused region"];
      if (n->kind() == ir::NodeKind::copy) ++features["compiled: copy"];
      if (n->kind() == ir::NodeKind::op && n->op()->aliases().is_mutable() && !n->group().empty())
        ++features["compiled: in-place collective"];
    }
    if (!plan0->graph->writebacks().empty()) ++features["compiled: writeback"];
  }
  for (const auto& [k, v] : features) totals.features[k] += v;
  return problems;
}

double percentile(std::vector<double> xs, double p) {
  std::sort(xs.begin(), xs.end());
  size_t i = std::min(xs.size() - 1, size_t(p * double(xs.size() - 1) + 0.5));
  return xs[i];
}

TEST(E2E, RandomProgramsCompiledEqualsEager) {
  const uint64_t seed = env_u64("SYMMFLOW_E2E_SEED", 1);
  const int programs = int(env_u64("SYMMFLOW_E2E_PROGRAMS", kDefaultPrograms));
  Tunables tunables_now = tunables();
  tunables_now.debug_collectives = true;  // each collective cross-checked on every rank at run time
  set_tunables(tunables_now);
  Totals totals;
  int failed = 0;
  for (int i = 0; i < programs; ++i) {
    std::vector<std::string> problems = check_program(seed + uint64_t(i), totals);
    if (problems.empty()) continue;
    if (++failed <= int(env_u64("SYMMFLOW_E2E_SHOW", 5))) {
      auto g =
          random_program({seed + uint64_t(i), 2 + int((seed + uint64_t(i)) % 3), 0, ops()}).graph;
      ADD_FAILURE() << fmt::format("program seed {} (world {}):\n  {}\n{}", seed + uint64_t(i),
                                   g->world_size(), fmt::join(problems, "\n  "),
                                   ir::print_graph(*g));
    }
  }
  EXPECT_EQ(failed, 0) << failed << " of " << programs << " programs failed";

  std::vector<double> ratios;
  for (const PoolRatio& r : totals.ratios) ratios.push_back(double(r.peak) / double(r.lower_bound));
  ASSERT_FALSE(ratios.empty());
  fmt::print(
      "peak / lower bound over {} pools of {} programs: median {:.3f}, p90 {:.3f}, p99 {:.3f}, "
      "worst {:.3f}\n",
      ratios.size(), programs, percentile(ratios, 0.5), percentile(ratios, 0.9),
      percentile(ratios, 0.99), percentile(ratios, 1.0));
  EXPECT_LE(percentile(ratios, 0.5), 1.05) << "issue 4: planned peak within 5% of the lower bound";
  int min_count = std::max(1, kMinCoverage * programs / 500);
  for (const auto& [name, count] : totals.features) fmt::print("  {:45} {}\n", name, count);
  for (const char* name : kRequired) {  // not checked when rerunning a few programs
    if (programs >= 100) {
      EXPECT_GE(totals.features[name], min_count) << name << " is exercised too rarely";
    }
  }
}

}  // namespace
}  // namespace symmflow::e2e
