// Compiler speed on generated model graphs (bench/model_graph.hpp) of 1k, 10k and 100k nodes:
//  - BM_compile: passes::compile (verify, every graph pass, plan_memory, emit_plan) with the
//    complexity fit (expected O(n log n)); its peer, measured in the same run, is parsing the same
//    graph from text (counter parse_s, CPU seconds) and the counter per_parse is compile time /
//    parse time.
//  - BM_parse: ir::parse_graph of the printed graph.
//  - BM_walk: a linear walk over the graph, the peer for how much time per node grows with n
//    from the memory hierarchy alone.
//  - BM_passes: the pipeline run pass by pass, each pass's mean CPU seconds (this thread's, so
//    other work on the machine does not count) as a counter (verify_in is the verifier on the
//    input; verify_each the verifier after every pass, as debug builds run it).
// Each iteration compiles a fresh graph parsed from the text with the timer paused.
#include <benchmark/benchmark.h>

#include <time.h>

#include <algorithm>
#include <map>
#include <string>

#include "bench/model_graph.hpp"
#include "symmflow/ir/text.hpp"
#include "symmflow/ir/verify.hpp"
#include "symmflow/passes/pipeline.hpp"
#include "symmflow/passes/plan_memory.hpp"

namespace {

using namespace symmflow;

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

const std::string& model_text(size_t nodes) {
  static std::map<size_t, std::string> cache;
  auto it = cache.find(nodes);
  if (it == cache.end()) {
    bench::ModelGraphOptions o;
    o.nodes = nodes;
    it = cache.emplace(nodes, ir::print_graph(*bench::model_graph(o))).first;
  }
  return it->second;
}

std::unique_ptr<ir::Graph> parse_model(size_t nodes) {
  ir::ParseOptions o;
  o.world_size = 4;
  return ir::parse_graph(model_text(nodes), o);
}

void BM_compile(benchmark::State& state) {
  size_t n = size_t(state.range(0));
  double parse_s = 0, compile_s = 0, worst = 0;
  for (auto _ : state) {
    state.PauseTiming();
    double t0 = thread_cpu_seconds();
    auto g = parse_model(n);
    parse_s += (thread_cpu_seconds() - t0);
    state.ResumeTiming();
    t0 = thread_cpu_seconds();
    auto plan = passes::compile(std::move(g));
    compile_s += (thread_cpu_seconds() - t0);
    benchmark::DoNotOptimize(plan.get());
    state.PauseTiming();
    for (const passes::PoolPlan& p : plan->pools)
      worst = std::max(worst, double(p.bytes) / double(std::max<size_t>(p.lower_bound, 1)));
    plan.reset();  // freeing the graph is not compile time
    state.ResumeTiming();
  }
  state.SetComplexityN(state.range(0));
  state.counters["parse_s"] = benchmark::Counter(parse_s, benchmark::Counter::kAvgIterations);
  state.counters["per_parse"] = compile_s / parse_s;
  state.counters["peak_over_lb"] = worst;  // the worst pool's planned peak / its lower bound
}

void BM_parse(benchmark::State& state) {
  size_t n = size_t(state.range(0));
  const std::string& text = model_text(n);
  for (auto _ : state) {
    auto g = parse_model(n);
    benchmark::DoNotOptimize(g.get());
    state.PauseTiming();
    g.reset();
    state.ResumeTiming();
  }
  state.SetComplexityN(state.range(0));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}

// A peer for the growth: one walk over every node, its arguments' types and use lists, and its
// outputs (linear by construction). Its time per node grows with n as the graph outgrows the
// caches, as every pass's does.
void BM_walk(benchmark::State& state) {
  auto g = parse_model(size_t(state.range(0)));
  for (auto _ : state) {
    size_t sum = 0;
    for (const ir::Node* n : g->nodes()) {
      for (const ir::Arg& a : n->args()) {
        if (a.kind == ir::Arg::Kind::value) sum += a.value->type().bytes() + a.value->uses().size();
      }
      for (const ir::Value* v : n->outputs()) sum += v->name().size() + v->type().shape.size();
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetComplexityN(state.range(0));
}

void BM_passes(benchmark::State& state) {
  size_t n = size_t(state.range(0));
  std::map<std::string, double> spent;
  for (auto _ : state) {
    state.PauseTiming();
    std::shared_ptr<ir::Graph> g = parse_model(n);
    state.ResumeTiming();
    double t0 = thread_cpu_seconds();
    ir::verify_or_throw(*g);
    spent["verify_in"] += (thread_cpu_seconds() - t0);
    for (const passes::PassInfo& p : passes::graph_passes()) {
      if (p.name == "verify") continue;
      t0 = thread_cpu_seconds();
      p.run(*g);
      spent[p.name] += (thread_cpu_seconds() - t0);
      t0 = thread_cpu_seconds();
      ir::verify_or_throw(*g);
      spent["verify_each"] += (thread_cpu_seconds() - t0);
    }
    t0 = thread_cpu_seconds();
    passes::MemoryPlan memory = passes::plan_memory(*g);
    spent["plan_memory"] += (thread_cpu_seconds() - t0);
    t0 = thread_cpu_seconds();
    auto plan = passes::emit_plan(g, std::move(memory));
    spent["emit_plan"] += (thread_cpu_seconds() - t0);
    state.PauseTiming();
    plan.reset();
    g.reset();
    state.ResumeTiming();
  }
  for (const auto& [name, s] : spent)
    state.counters[name] = benchmark::Counter(s, benchmark::Counter::kAvgIterations);
}

}  // namespace

BENCHMARK(BM_compile)
    ->RangeMultiplier(10)
    ->Range(1000, 100000)
    ->Unit(benchmark::kMillisecond)
    ->Complexity(benchmark::oNLogN);
BENCHMARK(BM_parse)
    ->RangeMultiplier(10)
    ->Range(1000, 100000)
    ->Unit(benchmark::kMillisecond)
    ->Complexity(benchmark::oNLogN);
BENCHMARK(BM_walk)
    ->RangeMultiplier(10)
    ->Range(1000, 100000)
    ->Unit(benchmark::kMicrosecond)
    ->Complexity(benchmark::oN);
BENCHMARK(BM_passes)->RangeMultiplier(10)->Range(1000, 100000)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
