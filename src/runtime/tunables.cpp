// The tunables table (see tunables.hpp). One row per field: name, environment variable, doc,
// and how to parse and print it. Values are read from the environment once.
#include "symmflow/runtime/tunables.hpp"

#include <cstdlib>
#include <functional>
#include <mutex>

#include <fmt/format.h>

#include "symmflow/core/error.hpp"

namespace symmflow {

namespace {

struct Row {
  const char* name;
  const char* doc;
  std::function<std::string(const Tunables&)> get;
  std::function<void(Tunables&, const std::string&)> set;  // throws on a bad value
};

int64_t parse_int(const std::string& env, const std::string& v, int64_t lo, int64_t hi) {
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  SF_CHECK(end && *end == '\0' && !v.empty() && x >= lo && x <= hi,
           "{}={}: expected an integer in [{}, {}]", env, v, lo, hi);
  return x;
}

double parse_double(const std::string& env, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  SF_CHECK(end && *end == '\0' && !v.empty() && x >= lo && x <= hi,
           "{}={}: expected a number in [{}, {}]", env, v, lo, hi);
  return x;
}

#define INT_ROW(field, lo, hi, doc)                                              \
  Row {                                                                          \
#field, doc, [](const Tunables& t) { return fmt::format("{}", t.field); },     \
      [](Tunables& t, const std::string& v) {                                         \
        t.field = parse_int(env_name(#field), v, lo, hi);                             \
      } \
  }

// A 0/1 tunable.
#define BOOL_ROW(field, doc)                                                     \
  Row {                                                                          \
#field, doc, [](const Tunables& t) { return std::string(t.field ? "1" : "0"); }, \
      [](Tunables& t, const std::string& v) {                                         \
        t.field = parse_int(env_name(#field), v, 0, 1) != 0;                          \
      } \
  }

std::string env_name(const std::string& field) {
  std::string out = "SYMMFLOW_";
  for (char c : field) out += char(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

const std::vector<Row>& rows() {
  static const std::vector<Row> kRows = {
      Row{"timeout_s",
          "Seconds any wait (barrier, signal, rendezvous, bootstrap) may take before "
          "it raises Timeout naming op, group, rank and peer",
          [](const Tunables& t) { return fmt::format("{}", t.timeout_s); },
          [](Tunables& t, const std::string& v) {
            t.timeout_s = parse_double(env_name("timeout_s"), v, 0.001, 86400);
          }},
      INT_ROW(spin_count, 0, int64_t(1) << 40, "Busy polls before a wait starts yielding the core"),
      INT_ROW(oversubscribed_spin_count, 0, int64_t(1) << 40,
              "Busy polls before a wait yields when this host runs more ranks than usable CPUs"),
      INT_ROW(yield_count, 0, int64_t(1) << 40, "Yields before a wait parks (futex) or sleeps"),
      INT_ROW(sleep_us, 0, 1000000, "Microseconds slept between polls once a wait backed off"),
      BOOL_ROW(pin_threads,
               "1: on the threads transport, rank r runs on the r-th usable CPU when there are at "
               "least as many CPUs as ranks"),
      INT_ROW(store_check_ms, 1, 60000,
              "store transport: milliseconds between a rank's checks of the world's poison key "
              "and of its same-host peers' processes (a killed peer is named within about this)"),
      INT_ROW(signal_channels, 1, 1024, "Channels of each signal pad (put_signal, barrier)"),
      INT_ROW(one_shot_max_bytes, 0, int64_t(1) << 40,
              "All-reduce algorithm choice: one-shot up to this many bytes, two-shot above"),
      INT_ROW(hierarchical_min_bytes, 0, int64_t(1) << 40,
              "A CPU all-reduce of a group spanning hosts goes hierarchical (reduce-scatter in "
              "each host, all-reduce of the shard across hosts, all-gather in each host) from "
              "this many bytes, flat through the network engine below (Note [hierarchical "
              "all-reduce]); never with SYMMFLOW_DETERMINISTIC=1; must be set alike on every "
              "rank"),
      INT_ROW(cuda_hierarchical_min_bytes, 0, int64_t(1) << 40,
              "A GPU all-reduce of a group spanning hosts goes hierarchical (reduce-scatter in "
              "each host over symmetric memory, NCCL all-reduce of the shard across hosts, "
              "all-gather in each host) from this many bytes, flat through NCCL below; 0 (the "
              "default until it is measured on GPUs): always flat (Note [hierarchical GPU "
              "all-reduce]); never with SYMMFLOW_DETERMINISTIC=1; must be set alike on every "
              "rank"),
      INT_ROW(cuda_one_shot_max_bytes, 0, int64_t(1) << 40,
              "The same choice on GPUs (cuda backend): one-shot up to this many bytes at 2 "
              "ranks, x 2 / ranks above (Note [one-shot limit per world])"),
      INT_ROW(cuda_threads, 32, 1024, "Threads per block of the GPU collectives (multiple of 32)"),
      INT_ROW(cuda_blocks_per_sm, 1, 4, "Most blocks per multiprocessor of the GPU two-shot"),
      INT_ROW(cuda_skinny_gemm_max_rows, 0, 16,
              "GPU bf16/f16 matmuls with at most this many rows use the weight-streaming kernel "
              "instead of cuBLAS (0: always cuBLAS)"),
      INT_ROW(collective_matmul_min_bytes, 0, int64_t(1) << 40,
              "decompose_collective_matmul makes a collective matmul of an all-gather whose "
              "result, or a matmul whose product, has at least this many bytes (Note [when to "
              "decompose]; 0: always); must be set alike on every rank"),
      BOOL_ROW(cuda_early_launch,
               "1: a GPU step with a step ahead of it on its stream starts while that one ends "
               "(programmatic dependent launch); behind a collective the skinny GEMM loads its weight "
               "meanwhile"),
      BOOL_ROW(bind_outputs,
               "1: a run given destinations for its outputs (run_into, symmflow.torch) writes an "
               "output that has a buffer of its own straight into its destination (Note [outputs "
               "bound in place]); 0: every output is computed in the plan's pool and copied"),
      BOOL_ROW(cuda_pointwise_codegen,
               "1: a fused pointwise region, and a plan's pointwise step, on the GPU runs as its "
               "own kernel compiled at run time (NVRTC, cached); 0: as a program of the pointwise "
               "interpreter"),
      BOOL_ROW(cuda_skinny_gemm_split,
               "1: a skinny GEMM of too few columns to fill half the GPU splits k over a cluster "
               "of 2 to 8 blocks (Note [skinny GEMM split]); 0: such GEMMs go to cuBLAS (the "
               "default until its effect is measured alone)"),
      BOOL_ROW(cuda_kernel_search,
               "1: where several kernels can run a GPU call (cuDNN's attention, symmflow's own), "
               "the first call of each shape times them and keeps the fastest, cached on disk "
               "(Note [measured kernel choice]); 0: the cached choice, else the library's kernel"),
      BOOL_ROW(cuda_cudnn,
               "1: GPU attention may run cuDNN's fused kernels (Note [cudnn attention]), loaded on "
               "first use; 0: symmflow's own attention kernels only"),
      BOOL_ROW(collective_agreement,
               "1: every collective's barrier carries a signature of the call (op, reduce op, "
               "dtype, element count, group), so ranks that disagree raise on every rank naming "
               "the field before any data moves (Note [collective agreement]); must be set alike "
               "on every rank"),
      BOOL_ROW(debug_collectives,
               "1: every collective first checks, with one extra exchange, that all ranks call the "
               "same op with the same dtype and size, listing every rank's call (a deeper check "
               "than collective_agreement's)"),
      BOOL_ROW(deterministic,
               "1: results that do not depend on the batch: a row's bits are the same whether it "
               "is computed alone or with others (CPU matrix products in one fixed order, Note "
               "[batch-invariant products]; GPU products through the skinny kernel's rows or the "
               "ordered GEMM, Note [skinny GEMM rows], and attention through the own kernel; "
               "collectives add in rank order always, and refuse NCCL's reductions across hosts); "
               "must be set alike on every rank"),
      BOOL_ROW(step_profile,
               "1: CPU plans time every step and add it to a per-op total (fused regions by their "
               "ops, with the largest operand's size), printed to stderr at exit and returned by "
               "symmflow.step_profile() (Note [step profile]); GPU plans time nothing here"),
      BOOL_ROW(rank_agreement,
               "1: the ranks running a plan that communicates check, with one small exchange, that "
               "they compiled the same plan and bind inputs of the same dtype, shape and strides "
               "(again only when a rank's binding changes); must be set alike on every rank"),
  };
  return kRows;
}

std::mutex& mutex() {
  static std::mutex m;
  return m;
}

// Reads the environment on first use; a bad value throws and is reported again on the next use.
Tunables& loaded_state() {
  static Tunables t;
  static bool loaded = false;
  if (!loaded) {
    Tunables fresh;
    for (const Row& r : rows()) {
      if (const char* v = std::getenv(env_name(r.name).c_str())) r.set(fresh, v);
    }
    t = fresh;
    loaded = true;
  }
  return t;
}

}  // namespace

const Tunables& tunables() {
  static thread_local const Tunables* cached = nullptr;
  if (cached) return *cached;
  std::lock_guard lock(mutex());
  cached = &loaded_state();
  return *cached;
}

void set_tunables(const Tunables& t) {
  std::lock_guard lock(mutex());
  loaded_state() = t;
}

std::vector<TunableInfo> tunable_table() {
  std::lock_guard lock(mutex());
  const Tunables& now = loaded_state();
  Tunables defaults;
  std::vector<TunableInfo> out;
  for (const Row& r : rows()) {
    out.push_back({r.name, env_name(r.name), r.get(defaults), r.get(now), r.doc});
  }
  return out;
}

}  // namespace symmflow
