// `symmflow run file.sf --ranks N [--transport threads|mpi|store] [--iters K] [--seed S] [--check]
// [--trace out.json] [--plugin P] [--no-race-check]`: compiles the graph once (refusing races on
// peer-accessed memory unless --no-race-check: docs/races.md) and runs it on N ranks: one thread
// each (run_threads), or one process each, started by `mpirun -np N` (--transport mpi) or by any
// launcher that sets RANK, WORLD_SIZE and SYMMFLOW_STORE (--transport store: torchrun, a shell
// loop; api::join_store_from_env). With processes every one compiles, --ranks may be left out and
// must equal N if given, and the ranks' results are exchanged and rank 0 alone prints. Every
// rank binds an api::Session and draws random inputs from seed + rank (so ranks differ), runs K
// iterations and rank 0's median time per iteration is printed.
// --check draws new random inputs for every iteration, runs the K iterations back to back (so
// that a fast rank may run ahead, as in production), then compares every output element of every
// iteration with the interpreter on the source program (api::Program::interpret) on that
// iteration's inputs, within the tolerance of Note [check tolerance] (api::compare_output: per dtype, growing with the square root
// of the output's rounding depth). Every graph input the run mutates (api::mutated_inputs: written
// in place, directly or through a view, or written back) is compared the same way: its contents
// after the compiled run against its contents after the interpreter's run of the same iteration
// (api::compare_mutated_input), one line each: "check: input x (mutated): OK (M elements, largest
// error F of the tolerance)". It then prints "check: OK (N outputs, M elements, largest error F
// of the tolerance)" (elements summed over ranks and iterations) or exits 1 naming the output or
// input, its rounding depth, iteration, rank and first bad element. --trace writes Chrome/Perfetto JSON:
// one "X" event per executed step (pid 0, tid = rank, name = the step's op, cat "comm" for ops
// with a group argument else "compute", ts/dur in microseconds from the start) and "M"
// thread_name events "rank N".
// --device cuda runs each rank on a GPU (rank % GPUs; ranks may share one): the plan is captured
// into a CUDA graph on the first iteration; inputs are copied from the host every iteration (so
// --check sees new values), and afterwards the inputs are bound into the plan's input buffers
// once and --iters graph replays run back to back, whose mean is printed as "replay".
#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "run_report.hpp"
#include "symmflow/symmflow.hpp"

namespace symmflow::tool {

namespace {
using Clock = std::chrono::steady_clock;

struct RunCmdOptions {
  std::string file;
  std::string transport = "threads";
  std::string device = "cpu";
  std::string trace;
  std::vector<std::string> plugins;
  int ranks = 1;
  bool ranks_given = false;  // --ranks on the command line
  std::vector<int> hosts;    // --hosts: simulated hosts of the thread ranks (Note [hosts])
  int iters = 1;
  uint64_t seed = 0;
  bool check = false;
  bool race_check = true;  // --no-race-check turns it off
};

api::CompileOptions compile_options(const RunCmdOptions& o) {
  api::CompileOptions c;
  c.race_check = o.race_check;
  c.device = o.device;
  c.hosts = o.hosts;
  return c;
}

// splitmix64: fast, deterministic, good enough for test inputs.
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Floats uniform in [-1, 1) scaled by 1/sqrt(size(0)) for matrices (so that products of weights
// stay O(1)); integers in [-4, 4] ([0, 4] unsigned, {0, 1} bool).
Tensor random_input(const api::TensorSpec& type, uint64_t& state) {
  Tensor t = Tensor::empty(type.shape, type.dtype);
  TensorView v = t.view();
  double scale =
      type.shape.size() >= 2 ? 1.0 / std::sqrt(double(std::max<int64_t>(1, type.shape[0]))) : 1.0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint64_t r = next_random(state);
    double x;
    if (is_floating(type.dtype)) {
      x = (double(r >> 11) * 0x1.0p-53 * 2.0 - 1.0) * scale;
    } else if (type.dtype == DType::boolean) {
      x = double(r & 1);
    } else if (type.dtype == DType::u32) {
      x = double(r % 5);
    } else {
      x = double(int64_t(r % 9) - 4);
    }
    store_double(v, i, x);
  }
  return t;
}

Tensor clone(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  std::memcpy(c.raw_data(), t.raw_data(), t.nbytes());  // inputs are fresh contiguous tensors
  return c;
}

// Checks --device before any rank starts: a name we know, and a GPU when it is cuda.
void check_device(const std::string& device) {
  SF_CHECK(device == "cpu" || device == "cuda", "--device: 'cpu' or 'cuda' (got '{}')", device);
  api::check_device(device);
}

// --device cuda: --iters replays with the inputs bound into the plan (no copies), back to back.
double time_replays(api::Session& session, const std::vector<Tensor>& inputs, int iters) {
  std::vector<Tensor> bound;
  for (size_t i = 0; i < inputs.size(); ++i) {
    bound.push_back(session.input_buffer(i));
    api::copy_tensor(bound.back(), inputs[i]);
  }
  api::RunOptions ro;
  ro.outputs = api::Outputs::views;
  ro.synchronize = false;
  session.run(bound, ro);
  session.synchronize();
  Clock::time_point begin = Clock::now();
  for (int i = 0; i < iters; ++i) session.run(bound, ro);
  session.synchronize();
  return std::chrono::duration<double, std::micro>(Clock::now() - begin).count() / iters;
}

// One rank's run: its inputs, K iterations, the replays on a GPU, and the check.
RankResult run_rank(api::Rank& rank, const RunCmdOptions& o, const api::CompiledProgram& compiled,
                    Clock::time_point t0) {
  auto us = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - t0).count();
  };
  // on_step's times are microseconds of the steady clock.
  const double t0_us = std::chrono::duration<double, std::micro>(t0.time_since_epoch()).count();
  RankResult res;
  const api::Program& source = compiled.source();
  uint64_t state = o.seed + uint64_t(rank.rank());
  next_random(state);
  auto draw = [&] {
    std::vector<Tensor> inputs;
    for (const api::TensorSpec& spec : source.inputs()) inputs.push_back(random_input(spec, state));
    return inputs;
  };
  std::vector<std::vector<Tensor>> inputs{draw()};  // per iteration with --check, else one
  api::Session session(compiled, rank, {o.device});
  res.device = session.device_description();
  api::RunOptions run_options;
  int iter = 0;
  if (!o.trace.empty()) {
    run_options.on_step = [&](size_t step, double begin_us, double end_us) {
      res.events.push_back({int(step), iter, begin_us - t0_us, end_us - begin_us});
    };
  }
  std::vector<std::vector<Tensor>> got;         // per iteration with --check
  std::vector<std::vector<Tensor>> got_inputs;  // the inputs after each run, with --check
  for (iter = 0; iter < o.iters; ++iter) {
    if (o.check && iter > 0) inputs.push_back(draw());
    std::vector<Tensor> exe_inputs;  // writebacks may change them
    for (const Tensor& t : inputs.back()) exe_inputs.push_back(clone(t));
    Clock::time_point begin = Clock::now();
    std::vector<Tensor> out = session.run(exe_inputs, run_options);
    res.iter_us.push_back(us(Clock::now()) - us(begin));
    if (o.check) {
      for (Tensor& t : out) t = api::to_host(t);
      got.push_back(std::move(out));
      got_inputs.push_back(std::move(exe_inputs));
    }
  }
  if (o.device != "cpu") res.replay_us = time_replays(session, inputs.back(), o.iters);
  if (!o.check) return res;
  const std::vector<size_t> mutated = api::mutated_inputs(compiled);
  for (size_t i : mutated) res.mutated.push_back({source.inputs()[i].name});
  for (size_t it = 0; it < got.size(); ++it) {
    // Collective: every rank interprets every iteration, even after a mismatch. The interpreter
    // mutates the tensors it is given, which share inputs[it]'s storage: they end as eager's.
    std::vector<Tensor> want = source.interpret(inputs[it]);
    const std::string context = fmt::format("of iteration {} on rank {}", it, rank.rank());
    res.outputs = want.size();
    for (size_t i = 0; i < want.size() && !res.mismatch; ++i) {
      res.elements += size_t(want[i].numel());
      api::OutputComparison c = api::compare_output(source, i, got[it].at(i), want[i], context);
      res.mismatch = c.mismatch;
      res.worst = std::max(res.worst, c.worst);
    }
    for (size_t k = 0; k < mutated.size() && !res.mismatch; ++k) {
      const Tensor& eager = inputs[it][mutated[k]];
      api::OutputComparison c = api::compare_mutated_input(
          compiled, mutated[k], api::to_host(got_inputs[it][mutated[k]]), eager, context);
      res.mutated[k].elements += size_t(eager.numel());
      res.mutated[k].worst = std::max(res.mutated[k].worst, c.worst);
      res.mismatch = c.mismatch;
    }
  }
  return res;
}

// Refuses a trace file that cannot be written before anything runs (issue 39 item 9: a long run
// used to fail only at its end). Creates or truncates it; the report writes it.
void check_trace_path(const std::string& path) {
  if (path.empty()) return;
  std::ofstream probe(path, std::ios::trunc);
  SF_CHECK(probe.good(), "--trace: cannot write '{}' ({}); nothing was run", path,
           std::strerror(errno));
}

// One process per rank (under mpirun, or meeting through a store): `rank` is this process. A
// rank that fails poisons the world first, so that its peers fail fast naming it; the results
// go to every rank and rank 0 prints the report.
int run_processes(api::Rank rank, const RunCmdOptions& o, const ReportOptions& ro) {
  std::optional<api::CompiledProgram> compiled;
  std::vector<RankResult> results;
  try {
    const bool mpi = o.transport == "mpi";
    SF_CHECK(!o.ranks_given || o.ranks == rank.world_size(),
             "--ranks {}: {} started {} process{} (leave --ranks out {}, or make them equal)",
             o.ranks, mpi ? "mpirun" : "the launcher (WORLD_SIZE)", rank.world_size(),
             rank.world_size() == 1 ? "" : "es", mpi ? "under mpirun" : "with --transport store");
    if (rank.rank() == 0) check_trace_path(o.trace);  // it writes the trace
    api::load_plugins(o.plugins);
    compiled =
        api::compile(api::Program::parse_file(o.file, rank.world_size()), compile_options(o));
    rank.barrier("symmflow run");
    RankResult mine = run_rank(rank, o, *compiled, Clock::now());
    for (const std::string& r : rank.allgather(to_json(mine), "symmflow run"))
      results.push_back(rank_result_from_json(r));
  } catch (const std::exception& e) {
    rank.abort(e.what());
    throw;
  }
  if (rank.rank() == 0) return report(compiled->explain(), results, ro);
  for (const RankResult& r : results) {
    if (r.mismatch) return 1;
  }
  return 0;
}

int run_run(const RunCmdOptions& o) {
  SF_CHECK(o.transport == "threads" || o.transport == "mpi" || o.transport == "store",
           "--transport: 'threads', 'mpi' or 'store' (got '{}')", o.transport);
  SF_CHECK(o.iters >= 1, "--iters must be at least 1 (got {})", o.iters);
  SF_CHECK(o.device == "cpu" || o.trace.empty(),
           "--trace times host steps; on --device cuda the steps are one CUDA graph");
  check_device(o.device);
  const ReportOptions ro{o.transport, o.trace, o.iters, o.device != "cpu", o.check};
  if (o.transport == "mpi") return run_processes(api::join_mpi(), o, ro);
  if (o.transport == "store") return run_processes(api::join_store_from_env(), o, ro);
  check_trace_path(o.trace);
  api::load_plugins(o.plugins);
  api::CompiledProgram compiled =
      api::compile(api::Program::parse_file(o.file, o.ranks), compile_options(o));
  std::vector<RankResult> results(size_t(o.ranks));
  const Clock::time_point t0 = Clock::now();
  api::run_threads(
      o.ranks, [&](api::Rank& rank) { results[size_t(rank.rank())] = run_rank(rank, o, compiled, t0); },
      o.hosts);
  return report(compiled.explain(), results, ro);
}
}  // namespace

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunCmdOptions>();
  CLI::App* sub = app.add_subcommand("run", "Compile a graph file and run it on N ranks");
  sub->add_option("file", o->file, "Graph file (.sf)")->required();
  CLI::Option* ranks = sub->add_option("--ranks", o->ranks, "Number of ranks (default 1)");
  sub->add_option("--hosts", o->hosts,
                  "Simulated hosts of the thread ranks, a host id per rank (e.g. 0,0,1,1): ranks "
                  "of two hosts share no memory and meet through the exchange (docs/multihost.md; "
                  "with processes set SYMMFLOW_HOST_ID per process instead)")
      ->delimiter(',');
  sub->add_option("--transport", o->transport,
                  "How ranks run: threads (default); mpi (one process each, under mpirun); store "
                  "(one process each, meeting through SYMMFLOW_STORE=file:<dir> | tcp:<host>:<port> "
                  "with RANK and WORLD_SIZE, as torchrun sets them)");
  sub->add_option("--device", o->device, "Where each rank computes: cpu (default) or cuda");
  sub->add_option("--iters", o->iters, "Iterations; the median time is printed (default 1)");
  sub->add_option("--seed", o->seed, "Seed of the random inputs (rank r uses seed + r)");
  sub->add_flag("--check", o->check, "Compare the outputs with the eager interpreter");
  sub->add_option("--trace", o->trace, "Write a Chrome/Perfetto trace JSON here");
  sub->add_option("--plugin", o->plugins, "Load a plugin shared library first (repeatable)");
  sub->add_flag("--no-race-check{false}", o->race_check,
                "Do not refuse programs whose peer accesses may race (docs/races.md)");
  return {sub, [o, ranks] {
            o->ranks_given = ranks->count() > 0;
            return run_run(*o);
          }};
}

}  // namespace symmflow::tool
