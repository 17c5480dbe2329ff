// The fused-region executor: runs a `fused` node's body (made by fuse_pointwise) over its
// tensors in cache-sized chunks, each body op through its registry kernel, writing the region's
// results straight into `outputs` (planned buffers, symmetric ones included: no staging copy).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "symmflow/core/tensor.hpp"
#include "symmflow/ir/graph.hpp"

namespace symmflow::exec {

// Elements per chunk: 16384 (64 KiB of f32 per live value, so a region's working set stays in L2;
// against 4096 it took a training step's regions 6% less time: fewer kernel calls per region).
inline constexpr int64_t kFusedChunkElems = 16384;

// Evaluates `body` elementwise over the shape of its first output. Every tensor in `inputs` (one
// per body input) and `outputs` (one per body output) must be contiguous, with the body value's
// dtype (values may differ in dtype) and that shape's element count, except that an input may
// instead be any strided tensor of its body value's shape, which broadcasts to the region's
// (PyTorch's rules; read by its strides, with stride 0 on the broadcast dims: Note [fused casts
// and broadcasts]); each body node must be
// an op with one fresh tensor return whose tensor arguments are body values, its result of the
// region's element count (Scalar and other literal args are passed as they are). Scratch tensors (one chunk per intermediate, reused by liveness) are allocated once
// per call, never per chunk. Throws InvalidUsage naming the body value on a mismatch.
void run_fused(const ir::Graph& body, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
               int64_t chunk_elems = kFusedChunkElems);

// Note [fused programs prepared once]: a plan's fused step runs its region on tensors of the same
// layout run after run, so its executor is prepared at the first run (the body's values indexed
// and checked, the instructions compiled with their bound literals, the chunk-sized scratch
// allocated) and kept in the step (Executable's launch record); a later run only checks and binds
// its tensors (each input read flat or gathered as before, with its new address and strides) and
// runs the chunks. A run whose layout changed (an input now strided, say) prepares again. After
// each run the program drops its views of the run's tensors, so it keeps no caller's memory alive.
// Measured on this project's CPU (tools/backend_overhead.py, 12 inputs into 3 fused steps):
// see docs/architecture.md.
class FusedProgram {
 public:
  explicit FusedProgram(const ir::Graph& body, int64_t chunk_elems = kFusedChunkElems);
  ~FusedProgram();
  FusedProgram(const FusedProgram&) = delete;
  FusedProgram& operator=(const FusedProgram&) = delete;

  // run_fused(body, inputs, outputs); true when it ran from the program an earlier call prepared.
  bool run(std::span<const Tensor> inputs, std::span<const Tensor> outputs);
  size_t preparations() const { return preparations_; }

 private:
  struct Prepared;
  const ir::Graph* body_;
  int64_t chunk_elems_;
  std::unique_ptr<Prepared> prepared_;
  size_t preparations_ = 0;
};

}  // namespace symmflow::exec
