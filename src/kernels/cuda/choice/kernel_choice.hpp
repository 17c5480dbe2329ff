// Note [measured kernel choice]: where several kernels can run one call of an op on a GPU
// (cuDNN's fused attention or symmflow's own kernel; later cuBLASLt's candidates), the first call
// of each shape times every candidate on the real arguments and keeps the fastest. Private to the
// cuda backend.
//
//   std::vector<KernelCandidate> c = {{"cudnn", [&] { run_cudnn(); }}, {"own", [&] { own(); }}};
//   size_t i = choose_kernel("scaled_dot_product_attention", key, c, refused);
//   c[i].run();
//
// - The key names the shape, strides, dtype and flags of the call; choose_kernel adds the GPU's
//   model and the CUDA runtime's version, and the caller the library versions, so a cached choice
//   is never reused on other hardware or libraries.
// - Timing: each candidate runs once to warm up, then five times, each between two events on the
//   current stream; the median counts, except for a candidate far slower than the best before it,
//   timed once (Note [slow candidates stop early] in kernel_choice.cpp). Candidates must be
//   idempotent (write only their outputs and scratch). A candidate that throws is dropped, its
//   message recorded.
// - Cache: in memory per process, and on disk (one line per choice, appended) in
//   $SYMMFLOW_CACHE_DIR, else $XDG_CACHE_HOME/symmflow, else ~/.cache/symmflow, file
//   kernel-choices-v1.tsv; a cache that cannot be read or written is skipped, never an error.
// - While the current stream is being captured into a CUDA graph (a plan's first run captures its
//   steps), the candidates are timed on a side stream of the thread (not captured) with the
//   thread's capture mode relaxed: they write their real outputs and scratch then, before the
//   graph ever runs, which is harmless because a step's outputs are written, never read, by its
//   own launch in the graph; the inputs' values do not matter to a kernel's time.
// - The tunable cuda_kernel_search 0: the cached choice if there is one, else candidate 0.
// - Every choice made or read is kept for `kernel_choices()` (symmflow/kernels/cuda.hpp), which
//   explain's GPU report prints; force_kernel(name) makes that candidate run wherever it can.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "symmflow/kernels/cuda.hpp"

namespace symmflow::cuda {

// Relaxes the calling thread's CUDA graph capture mode for the scope, so that one-time set-up
// (a library handle, a plan, the timing of Note [measured kernel choice]) may allocate and
// synchronize while a stream of the thread is being captured; restores it after.
class RelaxedCapture {
 public:
  RelaxedCapture();
  ~RelaxedCapture();
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  int saved_;
};

struct KernelCandidate {
  std::string name;            // "cudnn", "own"
  std::function<void()> run;   // launches the candidate on cuda::current_stream()
};

// The index into `candidates` (non-empty) to run. Thread-safe; the timing runs on the calling
// thread's current stream.
size_t choose_kernel(std::string_view op, const std::string& key,
                     const std::vector<KernelCandidate>& candidates,
                     const std::vector<RefusedKernel>& refused = {});

}  // namespace symmflow::cuda
