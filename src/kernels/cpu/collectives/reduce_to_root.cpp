// cpu kernel of symm_mem::reduce_out (Note [reduce to root] in src/ops/symm_mem/defs.cpp): the
// root's out = reduce over the ranks of input, in rank order; the other ranks' out is untouched.
//
// Contract: every rank of the group calls it with the same shapes, root and reduce_op. It is the
// one-shot of all_reduce.cpp (one_shot.hpp) on every rank, so the root's result is bitwise the
// one_shot_all_reduce of the same inputs; a non-root reduces into scratch it drops (it must
// take part in the one-shot's barriers anyway, and its cores have nothing better to do then).
// Expects: `input` contiguous in symmetric memory of the group; `out` of any layout.
// Refuses (InvalidUsage naming the op and argument, before any communication): a root outside
//   the group, `out` not like `input` or overlapping it, and everything the one-shot refuses
//   (group, reduce_op, dtype, symmetric input).
// Allocates a strided output's temp, and a non-root's scratch when a call is larger than any
// before on its thread.
#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/collectives/one_shot.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

constexpr std::string_view kReduceOut = "symm_mem::reduce_out";

void reduce_out_impl(const Tensor& input, int64_t root, const KernelCall& c, const Tensor& out) {
  constexpr std::string_view op = kReduceOut;
  Reduction red = call_reduction(c, op, 2, 3, input.dtype());  // Note [prepared collectives]
  SymmArg in(input, op, "input", *red.group);
  SF_CHECK(root >= 0 && root < red.group->size(),
           "{}: root {} out of range for group '{}' of size {}", op, root, red.group->name(),
           red.group->size());
  check_spec(op, "out", out, input.dtype(), input.shape(), "like 'input'");
  check_no_overlap(op, "out", out, "input", input);
  fingerprint(*red.group, op, input.dtype(), input.numel(), fmt::format("root={}", root));
  if (red.group->rank() == int(root)) {
    OutBuffer dst(out);
    one_shot(op, red, in, input.numel(), dst.data(), "root", root);
    dst.finish();
  } else {
    // The rank thread's scratch, grown to the largest call (8-byte elements: aligned for every
    // dtype), so a non-root allocates nothing per call.
    thread_local std::vector<double> dropped;
    dropped.resize(std::max(dropped.size(), (input.nbytes() + 7) / 8));
    one_shot(op, red, in, input.numel(), dropped.data(), "root", root);
  }
}

SYMMFLOW_LIBRARY_IMPL(symm_mem, cpu, m) {
  m.impl("reduce_out", [](KernelCall& c) {
    reduce_out_impl(c.arg(0).to_tensor(), c.arg(1).to_int(), c, c.arg(4).to_tensor());
  });
}

}  // namespace
}  // namespace symmflow::cpu
