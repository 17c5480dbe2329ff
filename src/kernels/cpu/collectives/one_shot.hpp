// The one-shot all-reduce of the cpu collectives (all_reduce.cpp), shared with the kernels that
// start with one (fused_all_reduce_rms_norm.cpp).
//
// Contract: one_shot(), given a Reduction (args.hpp: prepare or call_reduction), must be called by every rank of
// the group with the same numel: it reduces every rank's copy of `in` (numel elements) in rank
// order into `dst` (numel contiguous elements of in's dtype, not symmetric), bitwise the same on
// every rank; `in` may be reused once it returns (Note [one-shot staging] in all_reduce.cpp). Its
// first barrier makes the ranks agree on the call; ranks that differ raise before any peer's data
// is read.
#pragma once

#include <cstdint>
#include <string_view>

#include "kernels/cpu/collectives/args.hpp"

namespace symmflow::cpu {

// `param_name` / `param`: the caller's integer argument the ranks must agree on (reduce_out's
// root), beside op, reduce op, dtype and numel (Note [collective agreement] in
// src/runtime/agreement.cpp).
void one_shot(std::string_view op, const Reduction& red, const SymmArg& in, int64_t numel,
              void* dst, std::string_view param_name = {}, int64_t param = 0);

}  // namespace symmflow::cpu
