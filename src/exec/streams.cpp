// plan_streams (symmflow/exec/streams.hpp).
//
// Note [streams of a plan]: a step that communicates (its group has two ranks or more; at world
// size 1 a collective is a copy and counts as compute) runs on the
// communication stream when some compute could run beside it, and on the compute stream when
// nothing could: the step just before it runs on the compute stream and produces what it needs,
// and the step just after it needs what it produces (an 8-layer MLP's all-reduces); there the
// second stream would only add two event hops per collective. Every other step runs on the
// compute stream. Step s waits for the last earlier step t of the other stream that conflicts
// with it: t writes memory that s reads or writes, or t reads memory that s writes, or both
// communicate (steps of one group share its communicator's workspace, so they never overlap).
// Memory is compared by byte range (planned buffers share pools, so a buffer reused at the same
// offset conflicts with its previous tenant); a range not known before the run conflicts with
// everything. Waiting for t covers every earlier step of t's stream, so one event per step
// suffices, and a wait already implied by an earlier wait of the same stream is left out.
//
// Note [early launch]: a step that has a step ahead of it on its own stream and waits for no
// event may start while that step ends (on CUDA: programmatic dependent launch). Its kernels
// wait for the kernel ahead of them to complete before they touch anything, except the ranges
// of `stable`: what the step reads that no step of the plan writes (graph inputs, weights). A
// kernel may load those before that wait when the step ahead communicates (after_communication):
// a collective of a few hundred KiB leaves the memory idle, and the skinny GEMM streams its first
// weight stages meanwhile. Behind a compute step the same loads compete with it (bench_cuda_gemm,
// H200, back-to-back 16 x 4096 x 4096 GEMMs: 10.28 µs plain, 10.09 started early, 10.52 started
// early and loading the weight); behind a copy they only delay its first stage. At most one step
// per stream is early at a time: a kernel lets the next one start only after its own wait, so
// everything before it has completed.
#include "symmflow/exec/streams.hpp"

#include <cstddef>

namespace symmflow::exec {

namespace {

bool any_overlap(const std::vector<ByteRange>& a, const std::vector<ByteRange>& b) {
  for (const ByteRange& x : a) {
    for (const ByteRange& y : b) {
      if (x.overlaps(y)) return true;
    }
  }
  return false;
}

}  // namespace

std::vector<StepStream> plan_streams(const std::vector<StepAccess>& steps, bool early_launch) {
  const size_t n = steps.size();
  std::vector<StepStream> out(n);
  auto conflict = [&](size_t t, size_t s) {
    const StepAccess &a = steps[t], &b = steps[s];
    return (a.communicates && b.communicates) || any_overlap(a.writes, b.reads) ||
           any_overlap(a.writes, b.writes) || any_overlap(a.reads, b.writes);
  };
  std::vector<size_t> order;  // the steps that run
  for (size_t s = 0; s < n; ++s) {
    if (steps[s].runs) order.push_back(s);
  }
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t s = order[i];
    if (!steps[s].communicates) continue;
    const bool after_its_producer =
        i == 0 || (out[order[i - 1]].stream == 0 && conflict(order[i - 1], s));
    const bool before_its_consumer = i + 1 == order.size() || conflict(s, order[i + 1]);
    out[s].stream = after_its_producer && before_its_consumer ? 0 : 1;
  }
  int waited[2] = {-1, -1};  // per stream: the last step of the other stream it waited for
  int last[2] = {-1, -1};    // per stream: its last step so far
  for (size_t s : order) {
    const int mine = out[s].stream;
    for (size_t t = s; t-- > 0 && int(t) > waited[mine];) {
      if (!steps[t].runs || out[t].stream == mine || !conflict(t, s)) continue;
      out[s].wait_for = int(t);
      out[t].recorded = true;
      waited[mine] = int(t);
      break;
    }
    out[s].early = early_launch && last[mine] >= 0 && out[s].wait_for < 0;
    out[s].after_communication = out[s].early && steps[size_t(last[mine])].communicates;
    last[mine] = int(s);
  }
  for (size_t s : order) {
    for (const ByteRange& r : steps[s].reads) {
      bool written = r.unknown;
      for (size_t t : order) {
        if (written) break;
        for (const ByteRange& w : steps[t].writes) written = written || w.overlaps(r);
      }
      if (!written) out[s].stable.push_back(r);
    }
  }
  return out;
}

}  // namespace symmflow::exec
