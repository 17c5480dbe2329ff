// cpu kernels of the symm_mem all-reduce family, and the C++ entries of kernels/collectives.hpp.
//
// Contract (OPS.md, PyTorch's semantics, every mutating op returns ()):
//   one-shot: barrier; every rank reduces every peer's `input` in rank order into its output;
//     barrier (inputs reusable after it). Up to one_shot_max_bytes: copy into the group's staging,
//     one barrier, reduce the staged copies (Note [one-shot staging]). _copy variants first copy
//     `local_input` into `symm_buffer` (which must hold at least as many elements) and reduce its
//     first numel.
//   two-shot (in place): barrier; rank r reduces slice r (numel split into W near-equal contiguous
//     slices) from every peer in rank order, writes it into every peer's slice r; barrier. Each
//     element is reduced by exactly one rank. _out: the same, then input copied to `output`.
//   multimem_*: refused (no NVLink multicast on cpu), naming what to use instead.
// A group that spans hosts runs both through spanning.hpp (Note [spanning groups]).
// Arguments are validated (group, reduce_op, dtype, symmetric + contiguous, shapes, no overlap)
// before the first barrier, whose signature makes the ranks agree on the call (Note [collective
// agreement] in src/runtime/agreement.cpp); with debug_collectives the call is also fingerprinted
// across ranks first.
// No allocation on the success path except a strided output's temp and the first use of the
// per-thread scratch of the in-place one-shot. one_shot() is shared with the fused kernels through
// one_shot.hpp; a plan's calls take their group and reduce op from the launch record (Note
// [prepared collectives] in args.hpp), eager calls resolve them per call (prepare()).
#include <cstring>
#include <vector>

#include "kernels/cpu/collectives/args.hpp"
#include "kernels/cpu/collectives/one_shot.hpp"
#include "kernels/cpu/collectives/spanning.hpp"
#include "symmflow/kernels/collectives.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/runtime/tunables.hpp"

namespace symmflow {
namespace cpu {
namespace {

constexpr std::string_view kOneShot = "symm_mem::one_shot_all_reduce";
constexpr std::string_view kOneShotOut = "symm_mem::one_shot_all_reduce_out";
constexpr std::string_view kOneShotCopy = "symm_mem::one_shot_all_reduce_copy";
constexpr std::string_view kOneShotCopyOut = "symm_mem::one_shot_all_reduce_copy_out";
constexpr std::string_view kTwoShot = "symm_mem::two_shot_all_reduce_";
constexpr std::string_view kTwoShotOut = "symm_mem::two_shot_all_reduce_out";

constexpr size_t kStageAlways = 256;  // Note [one-shot staging]

}  // namespace

// Note [one-shot staging]
// A one-shot that fits the group's staging half copies its input there, passes one barrier and
// reduces every rank's staged copy: one synchronization instead of two, since the input is free
// again as soon as the copy is made. It pays when a barrier is dear: always when ranks outnumber
// CPUs (a barrier then costs context switches), else only up to kStageAlways bytes (peers then read
// freshly written lines from the writer's cache, which costs more per byte than the barrier saves:
// measured on 2 ranks, 2 cores, 0.3 against 0.4 us at 8 B but 3.3 against 0.7 us at 4 KiB). The
// halves alternate per call, and half h is written again only two one-shots later, after this rank
// passed another barrier in which every peer took part after reading half h (each collective passes
// at least one barrier after its reads). Larger one-shots read the inputs in place between two
// barriers.
void one_shot(std::string_view op, const Reduction& red, const SymmArg& in, int64_t numel,
              void* dst, std::string_view param_name, int64_t param) {
  Group& g = *red.group;
  const DType dtype = in.tensor().dtype();
  fingerprint(g, op, dtype, numel, reduce_op_name(red.op));
  const CollectiveCall call{op, reduce_op_name(red.op), dtype, numel, param_name, param};
  if (g.spans_hosts()) return span_all_reduce(red, call, in, numel, dst);  // spanning.hpp
  const size_t bytes = size_t(numel) * dtype_size(dtype);
  // Decided alike by every member (Note [staging agreed] in src/runtime/group.cpp).
  if (numel > 0 && bytes <= g.staging_half_bytes() &&
      (g.oversubscribed() || bytes <= kStageAlways)) {
    const int half = g.next_staging_half();
    std::memcpy(g.staging(g.rank(), half), in.local(), bytes);
    g.barrier(kCollectiveChannel, call);
    RankPointers ptrs(g.size(), [&](int r) { return g.staging(r, half); });
    red.fn(ptrs.at(0), g.size(), dst, numel, g.size());
    return;
  }
  g.barrier(kCollectiveChannel, call);
  if (numel > 0) {
    RankPointers ptrs(in, g.size());
    red.fn(ptrs.at(0), g.size(), dst, numel, g.size());
  }
  g.barrier(kCollectiveChannel, call);
}

namespace {

void one_shot_out_impl(std::string_view op, const Tensor& input, const Reduction& red,
                       const Tensor& out) {
  SymmArg in(input, op, "input", *red.group);
  check_spec(op, "out", out, input.dtype(), input.shape(), "like 'input'");
  check_no_overlap(op, "out", out, "input", input);
  OutBuffer dst(out);
  one_shot(op, red, in, input.numel(), dst.data());
  dst.finish();
}

void one_shot_copy_impl(std::string_view op, const Tensor& symm_buffer, const Tensor& local_input,
                        const Reduction& red, const Tensor& out) {
  SymmArg buf(symm_buffer, op, "symm_buffer", *red.group);
  SF_CHECK(symm_buffer.dtype() == local_input.dtype(),
           "{}: argument 'symm_buffer' is {} but 'local_input' is {}; they must have one dtype", op,
           symm_buffer.str(), local_input.str());
  SF_CHECK(symm_buffer.numel() >= local_input.numel(),
           "{}: argument 'symm_buffer' ({}) holds fewer elements than 'local_input' ({})", op,
           symm_buffer.str(), local_input.str());
  check_spec(op, "out", out, local_input.dtype(), local_input.shape(), "like 'local_input'");
  check_no_overlap(op, "out", out, "symm_buffer", symm_buffer);
  OutBuffer dst(out);
  // Our own copy: peers read it only after the first barrier of one_shot.
  copy_from(buf.local(), local_input);
  one_shot(op, red, buf, local_input.numel(), dst.data());
  dst.finish();
}

// Slice r of numel split into w near-equal contiguous slices: [begin, begin + len).
void slice_of(int64_t numel, int w, int r, int64_t* begin, int64_t* len) {
  int64_t base = numel / w, rem = numel % w;
  *begin = r * base + std::min<int64_t>(r, rem);
  *len = base + (r < rem ? 1 : 0);
}

void two_shot_impl(std::string_view op, const Tensor& input, const Reduction& red,
                   const Tensor* output) {
  SymmArg in(input, op, "input", *red.group);
  if (output) {
    check_spec(op, "output", *output, input.dtype(), input.shape(), "like 'input'");
    check_no_overlap(op, "output", *output, "input", input);
  }
  Group& g = *red.group;
  fingerprint(g, op, input.dtype(), input.numel(), reduce_op_name(red.op));
  const CollectiveCall call{op, reduce_op_name(red.op), input.dtype(), input.numel()};
  if (g.spans_hosts()) {  // spanning.hpp: in place, then the copy
    span_all_reduce(red, call, in, input.numel(), in.local());
    if (output) copy_into(*output, in.local());
    return;
  }
  const int w = g.size(), me = g.rank();
  int64_t begin, len;
  slice_of(input.numel(), w, me, &begin, &len);
  const size_t elem = dtype_size(input.dtype());
  g.barrier(kCollectiveChannel, call);
  if (len > 0) {
    RankPointers ptrs(in, w);
    char* mine = static_cast<char*>(in.local()) + begin * int64_t(elem);
    // Only this rank reads slice `me`, so reducing it in place is race-free.
    red.fn(ptrs.at(begin * int64_t(elem)), w, mine, len, w);
    for (int i = 1; i < w; ++i) {
      int p = (me + i) % w;  // staggered so that ranks write to different peers at once
      std::memcpy(static_cast<char*>(in.peer(p)) + begin * int64_t(elem), mine, size_t(len) * elem);
    }
  }
  g.barrier(kCollectiveChannel, call);
  if (output) copy_into(*output, in.local());
}

}  // namespace
}  // namespace cpu

void one_shot_all_reduce_out(const Tensor& symm_input, std::string_view reduce_op,
                             std::string_view group, const Tensor& out) {
  cpu::one_shot_out_impl(cpu::kOneShotOut, symm_input,
                         cpu::prepare(cpu::kOneShotOut, reduce_op, group, symm_input.dtype()), out);
}

void two_shot_all_reduce_(const Tensor& symm_input, std::string_view reduce_op,
                          std::string_view group) {
  cpu::two_shot_impl(cpu::kTwoShot, symm_input,
                     cpu::prepare(cpu::kTwoShot, reduce_op, group, symm_input.dtype()), nullptr);
}

void all_reduce(const Tensor& symm_input, std::string_view reduce_op, std::string_view group) {
  constexpr std::string_view op = "symmflow::all_reduce";
  if (int64_t(symm_input.nbytes()) > tunables().one_shot_max_bytes) {
    cpu::two_shot_impl(op, symm_input, cpu::prepare(op, reduce_op, group, symm_input.dtype()),
                       nullptr);
    return;
  }
  cpu::Reduction red = cpu::prepare(op, reduce_op, group, symm_input.dtype());
  cpu::SymmArg in(symm_input, op, "symm_input", *red.group);
  // Peers read our input until the second barrier, so the result waits in a scratch buffer.
  thread_local std::vector<std::byte> scratch;
  if (scratch.size() < symm_input.nbytes()) scratch.resize(symm_input.nbytes());
  cpu::one_shot(op, red, in, symm_input.numel(), scratch.data());
  if (symm_input.nbytes() > 0) std::memcpy(in.local(), scratch.data(), symm_input.nbytes());
}

namespace cpu {
namespace {

SYMMFLOW_LIBRARY_IMPL(symm_mem, cpu, m) {
  // Note [prepared collectives] (args.hpp): the group and reduce op from the launch record.
  m.impl("one_shot_all_reduce", [](KernelCall& c) {
    const Tensor& in = c.arg(0).to_tensor();
    one_shot_out_impl(kOneShot, in, call_reduction(c, kOneShot, 1, 2, in.dtype()), c.out(0));
  });
  m.impl("one_shot_all_reduce_out", [](KernelCall& c) {
    const Tensor& in = c.arg(0).to_tensor();
    one_shot_out_impl(kOneShotOut, in, call_reduction(c, kOneShotOut, 1, 2, in.dtype()),
                      c.arg(3).to_tensor());
  });
  m.impl("one_shot_all_reduce_copy", [](KernelCall& c) {
    const Tensor& local = c.arg(1).to_tensor();
    one_shot_copy_impl(kOneShotCopy, c.arg(0).to_tensor(), local,
                       call_reduction(c, kOneShotCopy, 2, 3, local.dtype()), c.out(0));
  });
  m.impl("one_shot_all_reduce_copy_out", [](KernelCall& c) {
    const Tensor& local = c.arg(1).to_tensor();
    one_shot_copy_impl(kOneShotCopyOut, c.arg(0).to_tensor(), local,
                       call_reduction(c, kOneShotCopyOut, 2, 3, local.dtype()),
                       c.arg(4).to_tensor());
  });
  m.impl("two_shot_all_reduce_", [](KernelCall& c) {
    const Tensor& in = c.arg(0).to_tensor();
    two_shot_impl(kTwoShot, in, call_reduction(c, kTwoShot, 1, 2, in.dtype()), nullptr);
  });
  m.impl("two_shot_all_reduce_out", [](KernelCall& c) {
    const Tensor& in = c.arg(0).to_tensor();
    two_shot_impl(kTwoShotOut, in, call_reduction(c, kTwoShotOut, 1, 2, in.dtype()),
                  &c.arg(3).to_tensor());
  });
  m.impl("multimem_all_reduce_", [](KernelCall&) {
    refuse_multicast("symm_mem::multimem_all_reduce_",
                     "symm_mem::two_shot_all_reduce_ (or symm_mem::one_shot_all_reduce)");
  });
  m.impl("multimem_one_shot_all_reduce", [](KernelCall&) {
    refuse_multicast(
        "symm_mem::multimem_one_shot_all_reduce",
        "symm_mem::one_shot_all_reduce (or symm_mem::two_shot_all_reduce_ for large tensors)");
  });
  m.impl("multimem_one_shot_all_reduce_out", [](KernelCall&) {
    refuse_multicast(
        "symm_mem::multimem_one_shot_all_reduce_out",
        "symm_mem::one_shot_all_reduce_out (or symm_mem::two_shot_all_reduce_out for large "
        "tensors)");
  });
}

}  // namespace
}  // namespace cpu
}  // namespace symmflow
