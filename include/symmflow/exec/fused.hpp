// The fused-region executor: runs a `fused` node's body (made by fuse_pointwise) over its
// tensors in cache-sized chunks, each body op through its registry kernel, writing the region's
// results straight into `outputs` (planned buffers, symmetric ones included: no staging copy).
#pragma once

#include <cstdint>
#include <span>

#include "symmflow/core/tensor.hpp"
#include "symmflow/ir/graph.hpp"

namespace symmflow::exec {

// Elements per chunk: 4096 (16 KiB of f32 per live value, so a region's working set stays in L1/L2).
inline constexpr int64_t kFusedChunkElems = 4096;

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

}  // namespace symmflow::exec
