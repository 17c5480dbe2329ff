// Contract in algorithm.hpp. cuda_all_reduce_algorithm is the rule the cuda Communicator runs
// (src/kernels/cuda/collectives/communicator.cpp); collective_algorithm describes it, with the cpu kernels'
// choice (kernels/cpu/collectives/all_reduce.cpp), for explain; every other collective is
// described by its definition (OpExchange, declared beside the op: Library::exchange).
#include "symmflow/kernels/algorithm.hpp"

#include <fmt/format.h>

#include "symmflow/ops/registry.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow::kernels {

namespace {

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::string_view base_name(std::string_view op) {
  if (starts_with(op, "symm_mem::")) op = op.substr(10);
  return op;
}

}  // namespace

std::string_view algorithm_name(AllReduceAlgorithm a) {
  switch (a) {
    case AllReduceAlgorithm::copy:
      return "copy";
    case AllReduceAlgorithm::one_shot:
      return "one_shot";
    case AllReduceAlgorithm::one_shot_ll:
      return "one_shot_ll";
    case AllReduceAlgorithm::two_shot:
      return "two_shot";
  }
  return "?";
}

// Note [one-shot limit per world]
// One-shot sends every rank's whole input to each of its W - 1 peers, (W - 1) B a rank; two-shot
// sends (W - 1) / W of B twice, 2 (W - 1) / W B, with one synchronisation more. At two ranks the
// traffic is equal and one-shot's single synchronisation wins up to large sizes
// (cuda_one_shot_max_bytes, 4 MiB, measured on 2xH200); at W ranks one-shot moves W / 2 times
// two-shot's bytes, so its limit is cuda_one_shot_max_bytes x 2 / W. On 4xH200 (docs/cuda.md)
// one-shot took 20.7 us at 1 MiB against two-shot's 25.0, and 51.6 us at 4 MiB against 36.5.
int64_t cuda_one_shot_limit(int world) {
  const int64_t limit = tunables().cuda_one_shot_max_bytes;
  return world <= 2 ? limit : limit * 2 / world;
}

AllReduceAlgorithm cuda_all_reduce_algorithm(int64_t bytes, int world, bool in_place,
                                             bool aligned_8) {
  if (world <= 1) return AllReduceAlgorithm::copy;
  if (in_place && bytes > cuda_one_shot_limit(world)) return AllReduceAlgorithm::two_shot;
  if (bytes <= kCudaLLMaxBytes && bytes % 8 == 0 && aligned_8) return AllReduceAlgorithm::one_shot_ll;
  return AllReduceAlgorithm::one_shot;
}

AlgorithmChoice collective_algorithm(std::string_view op, int64_t bytes, int world) {
  const std::string_view name = base_name(op);
  const bool one_shot = starts_with(name, "one_shot_all_reduce");
  const bool two_shot = starts_with(name, "two_shot_all_reduce");
  if (one_shot || two_shot) {
    if (world == 1) return {"copy", "copy", "one rank: the reduction of one value is the value"};
    const AllReduceAlgorithm cuda = cuda_all_reduce_algorithm(bytes, world, two_shot, true);
    if (one_shot) {
      return {"one_shot", std::string(algorithm_name(cuda)),
              fmt::format("the op says one_shot; cuda sends data and tag in one line up to {} B",
                          kCudaLLMaxBytes)};
    }
    std::string cuda_name(algorithm_name(cuda));
    if (cuda != AllReduceAlgorithm::two_shot) cuda_name += " in place";
    return {"two_shot", cuda_name,
            fmt::format("cuda: one_shot up to {} B at {} ranks (cuda_one_shot_max_bytes = {} B, "
                        "x 2 / ranks above 2 ranks), two_shot above",
                        cuda_one_shot_limit(world), world, tunables().cuda_one_shot_max_bytes)};
  }
  if (starts_with(name, "fused_all_reduce_add_rms_norm")) {
    // Note [fused all-reduce rms_norm on GPUs]: the exchange follows the all-reduce's rule.
    if (world == 1) return {"local", "local", "one rank: the rows are normalized in place"};
    const AllReduceAlgorithm cuda = cuda_all_reduce_algorithm(bytes, world, true, true);
    return {"one_shot+norm", fmt::format("{}+norm", algorithm_name(cuda)),
            fmt::format("cuda: one_shot_ll up to {} B (rows of whole 8-byte units), one_shot up "
                        "to {} B at {} ranks (cuda_one_shot_max_bytes = {} B, x 2 / ranks above "
                        "2 ranks), two_shot above; then residual add and rms_norm per row in the "
                        "same kernel",
                        kCudaLLMaxBytes, cuda_one_shot_limit(world), world,
                        tunables().cuda_one_shot_max_bytes)};
  }
  if (starts_with(name, "multimem_")) return {"refused", "refused", "needs multicast"};
  // The others: what the op's definition declares (Library::exchange), or its functional op's.
  const Registry& registry = Registry::global();
  const OpDef* def = registry.find(op);
  if (!def && op.find("::") == std::string_view::npos)
    def = registry.find(fmt::format("symm_mem::{}", op));
  if (const OpExchange* e = def ? def->exchange() : nullptr) {
    std::string a = e->algorithm;
    if (world == 1 && a != "wait" && a != "push+signal") a = "local";
    return {a, a, e->why};
  }
  return {};
}

bool hierarchical_all_reduce(int64_t bytes, const SpanShape& span, std::string* why) {
  const Tunables& t = tunables();
  std::string reason;
  bool yes = false;
  if (t.deterministic)
    reason = "flat: SYMMFLOW_DETERMINISTIC=1 keeps one order of the sum at every size";
  else if (!span.uniform)
    reason = "flat: the hosts hold different numbers of members";
  else if (span.per_host <= 1)
    reason = "flat: one member per host";
  else if (bytes < t.hierarchical_min_bytes)
    reason = fmt::format("flat: {} B < SYMMFLOW_HIERARCHICAL_MIN_BYTES = {} B", bytes,
                         t.hierarchical_min_bytes);
  else
    yes = true, reason = fmt::format("hierarchical: {} B >= SYMMFLOW_HIERARCHICAL_MIN_BYTES = {} B",
                                     bytes, t.hierarchical_min_bytes);
  if (why) *why = std::move(reason);
  return yes;
}

bool cuda_hierarchical_all_reduce(int64_t bytes, const SpanShape& span, std::string* why) {
  const Tunables& t = tunables();
  std::string reason;
  bool yes = false;
  if (t.cuda_hierarchical_min_bytes == 0)
    reason = "flat: SYMMFLOW_CUDA_HIERARCHICAL_MIN_BYTES = 0 (off until measured)";
  else if (t.deterministic)
    reason = "flat: SYMMFLOW_DETERMINISTIC=1";
  else if (!span.uniform || span.per_host <= 1)
    reason = "flat: one member per host, or hosts of different sizes";
  else if (bytes < t.cuda_hierarchical_min_bytes)
    reason = fmt::format("flat: {} B < SYMMFLOW_CUDA_HIERARCHICAL_MIN_BYTES", bytes);
  else if (bytes % (8 * int64_t(span.per_host)) != 0)
    reason = fmt::format("flat: {} B is not a multiple of 8 x {} members", bytes, span.per_host);
  else
    yes = true, reason = "hierarchical";
  if (why) *why = std::move(reason);
  return yes;
}

// The GPU path of an op of a group across hosts (Note [nccl engine] in
// src/kernels/cuda/collectives/nccl.cpp: src/kernels/cuda/collectives/spanning.cpp runs it).
static std::string gpu_spanning(std::string_view name, int64_t bytes, const SpanShape& span) {
  if (starts_with(name, "fused_all_reduce_add_rms_norm"))
    return "refused (no fused all-reduce + RMSNorm across hosts on GPUs)";
  if (starts_with(name, "fused_all_gather_matmul") || starts_with(name, "fused_matmul_reduce_"))
    return "refused (no collective matmul across hosts on GPUs)";
  if (starts_with(name, "one_shot_all_reduce") || starts_with(name, "two_shot_all_reduce") ||
      name == "all_reduce") {
    return cuda_hierarchical_all_reduce(bytes, span, nullptr)
               ? "hierarchical: in each host, nccl all-reduce across"
               : "nccl all-reduce";
  }
  if (starts_with(name, "reduce_out")) return "nccl reduce";
  if (name.find("reduce_scatter") != std::string_view::npos) return "nccl reduce-scatter";
  if (name.find("all_gather") != std::string_view::npos) return "nccl all-gather";
  if (starts_with(name, "all_to_all_vdev"))
    return "refused (all_to_all_vdev across hosts on GPUs: use all_to_all)";
  if (starts_with(name, "all_to_all") || starts_with(name, "collective_permute"))
    return "nccl send/recv";
  if (starts_with(name, "broadcast")) return "nccl broadcast";
  if (name == "barrier") return "nccl (a one-element all-reduce)";
  if (starts_with(name, "put_signal") || starts_with(name, "wait_signal") || name == "get")
    return "refused (signals and loads stay inside a host)";
  return "nccl";
}

AlgorithmChoice spanning_algorithm(std::string_view op, int64_t bytes, const SpanShape& span) {
  const std::string_view name = base_name(op);
  const int world = span.hosts * span.per_host;  // exact when uniform; else an upper bound
  const std::string where =
      fmt::format("spans {} hosts ({} member{} per host{})", span.hosts, span.per_host,
                  span.per_host == 1 ? "" : "s", span.uniform ? "" : " at most");
  const std::string gpu = gpu_spanning(name, bytes, span);
  const bool all_reduce = starts_with(name, "one_shot_all_reduce") ||
                          starts_with(name, "two_shot_all_reduce") ||
                          starts_with(name, "fused_all_reduce_add_rms_norm") ||
                          starts_with(name, "reduce_out") || name == "all_reduce";
  if (all_reduce) {
    std::string why;
    if (hierarchical_all_reduce(bytes, span, &why)) {
      const int64_t slice = bytes / std::max(1, span.per_host);
      return {"hierarchical", gpu,
              fmt::format("{}; {}: in each host {} B read and {} B written per member through "
                          "memory, across hosts {} B received per member through the exchange",
                          where, why, (span.per_host - 1) * slice, (span.per_host - 1) * slice,
                          (span.hosts - 1) * slice)};
    }
    return {"exchange", gpu,
            fmt::format("{}; {}: every member's {} B to every member through the exchange ({} B "
                        "received per member)",
                        where, why, bytes, int64_t(world - 1) * bytes)};
  }
  if (starts_with(name, "put_signal") || starts_with(name, "wait_signal") || name == "get")
    return {"this host only", gpu,
            fmt::format("{}; signals and loads reach members of one's own host only", where)};
  return {"exchange", gpu,
          fmt::format("{}; one exchange of every member's {} B through the bootstrap (MPI, the "
                      "store) instead of loads from peers' memory",
                      where, bytes)};
}

}  // namespace symmflow::kernels
