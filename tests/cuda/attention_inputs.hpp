// A random attention operand on the host and the same on the GPU, for the GPU tests of attention
// (test_cuda_llama_ops, test_cuda_attention).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "support/tensors.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/ops/call.hpp"

namespace symmflow::cuda::testing {

// [b, h, l, e] with elements in [-2, 2), both laid out as [b, l, h, e] and permuted (a decoder's
// strided views, read in place) when `permuted`.
inline std::pair<Tensor, Tensor> attention_input(int64_t b, int64_t h, int64_t l, int64_t e,
                                                 DType d, uint64_t seed, bool permuted) {
  if (!permuted) {
    Tensor x = symmflow::testing::random_tensor({b, h, l, e}, d, seed, -2, 2);
    return {x, to_device(x)};
  }
  Tensor x = symmflow::testing::random_tensor({b, l, h, e}, d, seed, -2, 2);
  std::vector<int64_t> order{0, 2, 1, 3};
  return {call("aten::permute", {x, order}).to_tensor(),
          call("aten::permute", {to_device(x), order}).to_tensor()};
}

}  // namespace symmflow::cuda::testing
