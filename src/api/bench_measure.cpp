// Measurement of symmflow's collectives on the current runtime (threads or mpi transport), and
// the helpers of `symmflow bench collectives` (contract and timing convention in
// symmflow/api/bench.hpp). One symmetric heap, sized for the largest case, is allocated once and
// every size is a tensor at its offset 0, so that the mpi transport (whose windows live until
// finalize) does not grow with the number of sizes.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "api/bench_internal.hpp"
#include "symmflow/api/bench.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/runtime/heap.hpp"
#include "symmflow/kernels/collectives.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow::api::bench {

bool is_all_reduce(const std::string& op) {
  return op == "one_shot" || op == "two_shot" || op == "all_reduce";
}

std::vector<int64_t> sizes_for(const Options& o, const std::string& op, int ranks) {
  std::set<int64_t> out;
  int64_t unit = is_all_reduce(op) ? 4 : 4 * int64_t(ranks);
  auto add = [&](int64_t b) { out.insert(std::max<int64_t>(unit, (b + unit - 1) / unit * unit)); };
  for (int64_t b = o.min_bytes; b <= o.max_bytes; b *= o.factor) {
    add(b);
    if (b > o.max_bytes / o.factor) break;
  }
  add(o.max_bytes);
  return {out.begin(), out.end()};
}

double busbw_gbps(const std::string& op, int64_t bytes, double median_us, int ranks) {
  if (median_us <= 0) return 0;
  double algbw = double(bytes) / (median_us * 1e-6) / 1e9;
  double w = ranks;
  return algbw * (is_all_reduce(op) ? 2 * (w - 1) / w : (w - 1) / w);
}

std::string peer_of(const std::string& op) {
  if (is_all_reduce(op)) return "MPI_Allreduce";
  if (op == "reduce_scatter") return "MPI_Reduce_scatter_block";
  return "MPI_Allgather";
}

double median(std::vector<double> s) {
  std::sort(s.begin(), s.end());
  size_t n = s.size();
  return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

int64_t parse_bytes(const std::string& text) {
  std::string t = text;
  if (!t.empty() && (t.back() == 'B' || t.back() == 'b')) t.pop_back();
  int64_t unit = 1;
  if (!t.empty()) {
    switch (t.back()) {
      case 'K': case 'k': unit = int64_t(1) << 10; break;
      case 'M': case 'm': unit = int64_t(1) << 20; break;
      case 'G': case 'g': unit = int64_t(1) << 30; break;
      default: break;
    }
    if (unit != 1) t.pop_back();
  }
  char* end = nullptr;
  long long v = std::strtoll(t.c_str(), &end, 10);
  SF_CHECK(!t.empty() && end && *end == '\0' && v > 0,
           "bench: bad size '{}' (expected a positive number with an optional K, M or G)", text);
  return int64_t(v) * unit;
}

std::string format_bytes(int64_t b) {
  if (b >= (int64_t(1) << 20) && b % (int64_t(1) << 20) == 0) return fmt::format("{}M", b >> 20);
  if (b >= 1024 && b % 1024 == 0) return fmt::format("{}K", b >> 10);
  return fmt::format("{}", b);
}

namespace {

// A call bound once, as a compiled plan runs it: the op is looked up and its arguments bound
// before timing; each call dispatches straight to the kernel with its output preset.
std::function<void()> bound_call(const std::string& name, const std::vector<Value>& args,
                                 std::vector<Value> outputs = {}) {
  const OpDef& op = Registry::global().get(name);
  auto bound = std::make_shared<std::vector<Value>>(bind_args(op, args));
  auto outs = std::make_shared<std::vector<Value>>(std::move(outputs));
  return [&op, bound, outs] { call_bound_into(op, *bound, *outs); };
}

// A timed call of `op` on `n` elements: inputs carved from `heap`, outputs regular tensors.
std::function<void()> make_call(const std::string& op, const std::shared_ptr<SymmetricHeap>& heap,
                                int64_t bytes, int ranks) {
  int64_t n = bytes / 4;
  if (op == "one_shot") {
    Tensor x = symmetric_tensor(heap, 0, {n}, DType::f32);
    return bound_call("symm_mem::one_shot_all_reduce", {x, "sum", "world"},
                      {Tensor::empty({n}, DType::f32)});
  }
  if (op == "two_shot") {
    Tensor x = symmetric_tensor(heap, 0, {n}, DType::f32);
    return bound_call("symm_mem::two_shot_all_reduce_", {x, "sum", "world"});
  }
  if (op == "all_reduce") {
    Tensor x = symmetric_tensor(heap, 0, {n}, DType::f32);
    return [x] { all_reduce(x, "sum", "world"); };
  }
  if (op == "reduce_scatter") {
    Tensor x = symmetric_tensor(heap, 0, {n}, DType::f32);
    Tensor out = Tensor::empty({n / ranks}, DType::f32);
    return bound_call("symm_mem::reduce_scatter_out", {x, "world", false, out});
  }
  if (op == "all_gather") {
    Tensor x = symmetric_tensor(heap, 0, {n / ranks}, DType::f32);
    Tensor out = Tensor::empty({n}, DType::f32);
    return bound_call("symm_mem::all_gather_out", {x, "world", out});
  }
  invalid_usage("bench: unknown op '{}'", op);
}

// Per-iteration maximum over the ranks' samples, then the median (bench.hpp).
double slowest_rank_median(Group& g, const std::vector<double>& mine) {
  std::string blob(mine.size() * sizeof(double), '\0');
  std::memcpy(blob.data(), mine.data(), blob.size());
  std::vector<std::string> all = g.allgather(blob, "bench collectives");
  std::vector<double> worst(mine.size(), 0.0);
  for (const std::string& b : all) {
    for (size_t i = 0; i < worst.size(); ++i) {
      double v;
      std::memcpy(&v, b.data() + i * sizeof(double), sizeof v);
      worst[i] = std::max(worst[i], v);
    }
  }
  return median(worst);
}

}  // namespace

std::vector<Measurement> measure_symmflow(Runtime& rt, const Options& o, const Progress& progress,
                                          std::vector<std::string>& errors) {
  Group& g = *rt.group("world");
  const int channel = g.channels() - 1;  // kept apart from the channels kernels use
  int64_t largest = 64;
  for (const std::string& op : o.ops)
    for (int64_t b : sizes_for(o, op, g.size())) largest = std::max(largest, b);
  auto heap = SymmetricHeap::allocate(rt.group("world"), size_t(largest), "bench collectives");
  // Small values so that repeated in-place sums stay finite for a long time.
  std::fill_n(static_cast<float*>(heap->local()), largest / 4, 1e-6f);
  // Settle first: right after start-up, oversubscribed rank threads are still being spread over
  // the CPUs, and the first op measured ran 1-2 us slower than the same op measured later.
  for (int i = 0; i < 500; ++i) g.barrier(channel, "bench collectives");
  std::vector<Measurement> out;
  for (const std::string& op : o.ops) {
    for (int64_t bytes : sizes_for(o, op, g.size())) {
      if (progress) progress(fmt::format("{} {} {}", op, rt.bootstrap().transport_name(), format_bytes(bytes)));
      std::vector<double> samples;
      try {
        std::function<void()> run = make_call(op, heap, bytes, g.size());
        for (int i = 0; i < o.warmup; ++i) {
          g.barrier(channel, "bench collectives");
          run();
        }
        for (int i = 0; i < o.iters; ++i) {
          g.barrier(channel, "bench collectives");
          auto start = std::chrono::steady_clock::now();
          run();
          samples.push_back(
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
        }
      } catch (const Error& e) {
        // Errors raised before any communication (no kernel, bad arguments) are the same on every
        // rank; anything else (timeouts) is not recoverable.
        if (e.code() != ErrorCode::InvalidUsage) throw;
        if (g.rank() == 0) errors.push_back(fmt::format("{} on {}: {}", op, rt.bootstrap().transport_name(), e.what()));
        break;
      }
      double med = slowest_rank_median(g, samples);
      if (g.rank() == 0) out.push_back({op, bytes, med});
    }
  }
  g.barrier(channel, "bench collectives");
  return out;
}

std::vector<Measurement> measure_threads(const Options& o, const Progress& progress,
                                         std::vector<std::string>& errors) {
  std::vector<Measurement> out;
  Registry::global();  // register the ops once, before the rank threads look them up
  run_threads(o.ranks, [&](Runtime& rt) {
    std::vector<std::string> errs;
    std::vector<Measurement> m = measure_symmflow(rt, o, rt.rank() == 0 ? progress : nullptr, errs);
    if (rt.rank() == 0) {
      out = std::move(m);
      errors = std::move(errs);
    }
  });
  return out;
}

}  // namespace symmflow::api::bench
