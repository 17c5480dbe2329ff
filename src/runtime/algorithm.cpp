// Contract in algorithm.hpp. The rules mirror the kernels: cpu one_shot/two_shot
// (kernels/cpu/collectives/all_reduce.cpp), cuda Communicator::all_reduce and
// all_reduce_inplace (runtime/cuda/communicator.cpp), the exchange kernels (Note [cuda exchange]).
#include "symmflow/runtime/algorithm.hpp"

#include <fmt/format.h>

#include "symmflow/runtime/tunables.hpp"

namespace symmflow {

namespace {

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::string_view base_name(std::string_view op) {
  if (starts_with(op, "functional<") && op.back() == '>') op = op.substr(11, op.size() - 12);
  if (starts_with(op, "symm_mem::")) op = op.substr(10);
  return op;
}

// The cuda one_shot variant for `bytes` (planned buffers are 64-byte aligned).
std::string cuda_one_shot(int64_t bytes) {
  return bytes <= kCudaLLMaxBytes && bytes % 8 == 0 ? "one_shot_ll" : "one_shot";
}

}  // namespace

bool cuda_uses_two_shot(int64_t bytes, int world) {
  return world > 1 && bytes > tunables().cuda_one_shot_max_bytes;
}

AlgorithmChoice collective_algorithm(std::string_view op, int64_t bytes, int world) {
  const std::string_view name = base_name(op);
  const bool one_shot = starts_with(name, "one_shot_all_reduce");
  const bool two_shot = starts_with(name, "two_shot_all_reduce");
  if (one_shot || two_shot) {
    if (world == 1) return {"copy", "copy", "one rank: the reduction of one value is the value"};
    if (one_shot) {
      return {"one_shot", cuda_one_shot(bytes),
              fmt::format("the op says one_shot; cuda sends data and tag in one line up to {} B",
                          kCudaLLMaxBytes)};
    }
    const int64_t limit = tunables().cuda_one_shot_max_bytes;
    return {"two_shot",
            cuda_uses_two_shot(bytes, world) ? "two_shot" : cuda_one_shot(bytes) + " in place",
            fmt::format("cuda: one_shot up to cuda_one_shot_max_bytes = {} B, two_shot above",
                        limit)};
  }
  if (starts_with(name, "multimem_")) return {"refused", "refused", "needs multicast"};
  struct Row {
    std::string_view op, algorithm, why;
  };
  static const Row rows[] = {
      {"all_gather_out", "pull", "barrier, read every peer's input, barrier"},
      {"_low_contention_all_gather", "pull", "barrier, read every peer's input, barrier"},
      {"reduce_scatter_out", "pull-reduce", "barrier, reduce own chunk from every peer, barrier"},
      {"_low_contention_reduce_scatter", "pull-reduce",
       "barrier, reduce own chunk from every peer, barrier"},
      {"all_to_all_vdev", "pull", "barrier, read the splits and rows of every peer, barrier"},
      {"collective_permute", "push", "barrier, write into the receiver's out, barrier"},
      {"collective_permute_out", "push", "barrier, write into the receiver's out, barrier"},
      {"broadcast_", "pull", "barrier, read the root's input, barrier"},
      {"fused_all_reduce_add_rms_norm", "one_shot+norm",
       "one_shot all-reduce, then residual add and rms_norm per row (cuda: one kernel)"},
      {"fused_all_reduce_add_rms_norm_out", "one_shot+norm",
       "one_shot all-reduce, then residual add and rms_norm per row (cuda: one kernel)"},
      {"put_signal", "push+signal", "write into the peer, then raise its signal"},
      {"wait_signal", "wait", "consume the peer's signal"},
      {"get", "copy", "read the peer's copy"},
      {"barrier", "barrier", "signal every peer, wait for every peer"},
  };
  for (const Row& r : rows) {
    if (name == r.op) {
      std::string a(r.algorithm);
      if (world == 1 && a != "wait" && a != "push+signal") a = "local";
      return {a, a, std::string(r.why)};
    }
  }
  return {};
}

}  // namespace symmflow
