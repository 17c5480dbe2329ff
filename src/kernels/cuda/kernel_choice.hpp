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
//   current stream; the median counts. Candidates must be idempotent (write only their outputs and
//   scratch). A candidate that throws is dropped, its message recorded.
// - Cache: in memory per process, and on disk (one line per choice, appended) in
//   $SYMMFLOW_CACHE_DIR, else $XDG_CACHE_HOME/symmflow, else ~/.cache/symmflow, file
//   kernel-choices-v1.tsv; a cache that cannot be read or written is skipped, never an error.
// - No timing while the stream is captured into a CUDA graph (nothing would run) or when the
//   tunable cuda_kernel_search is 0: the cached choice if there is one, else candidate 0. The
//   executor's warm-up run before a capture makes every choice.
// - Every choice made or read is kept for `kernel_choices()` (symmflow/kernels/cuda.hpp), which
//   explain's GPU report prints; force_kernel(name) makes that candidate run wherever it can.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "symmflow/kernels/cuda.hpp"

namespace symmflow::cuda {

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
