// Strided N-d iteration over N operands sharing one iteration shape, for the CPU kernels.
//
// make_loop() drops size-1 dims and merges dims that are laid out back to back in every operand,
// so contiguous operands collapse to one dim; for_each_row() then calls a row functor
//   f(const std::array<int64_t, N>& offsets, const std::array<int64_t, N>& steps, int64_t n)
// once per innermost row with element offsets of the row's first element and the per-operand
// element steps along it. The functor is a template parameter (inlined, no virtual calls), so a
// kernel writes its tight typed loop inside it and branches on unit/zero steps for a fast path.
// A broadcast operand has stride 0 along the broadcast dims (see broadcast_strides()).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "symmflow/core/shape.hpp"

namespace symmflow::cpu {

// Strides of a tensor of `t_shape`/`t_strides` seen with `shape` under right-aligned broadcasting:
// missing and size-1 dims get stride 0. The caller has checked that the shapes broadcast.
inline Strides broadcast_strides(const Shape& t_shape, const Strides& t_strides,
                                 const Shape& shape) {
  Strides out(shape.size(), 0);
  size_t lead = shape.size() - t_shape.size();
  for (size_t i = 0; i < t_shape.size(); ++i) {
    out[lead + i] = t_shape[i] == 1 ? 0 : t_strides[i];
  }
  return out;
}

template <size_t N>
struct StridedLoop {
  Shape shape;                      // coalesced; empty means one element
  std::array<Strides, N> strides;   // per operand, in elements
  bool empty = false;               // some dim is 0: nothing to visit
};

template <size_t N>
StridedLoop<N> make_loop(const Shape& shape, const std::array<Strides, N>& strides) {
  StridedLoop<N> loop;
  for (int64_t s : shape) loop.empty = loop.empty || s == 0;
  if (loop.empty) return loop;
  // Keep dims of size > 1, outermost first.
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !loop.shape.empty();
    for (size_t k = 0; merge && k < N; ++k) {
      // The previous kept dim (outer) must step exactly over this whole dim.
      merge = loop.strides[k].back() == strides[k][d] * shape[d];
    }
    if (merge) {
      loop.shape.back() *= shape[d];
      for (size_t k = 0; k < N; ++k) loop.strides[k].back() = strides[k][d];
    } else {
      loop.shape.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k) loop.strides[k].push_back(strides[k][d]);
    }
  }
  return loop;
}

template <size_t N, typename F>
void for_each_row(const StridedLoop<N>& loop, F&& f) {
  std::array<int64_t, N> offsets{};
  std::array<int64_t, N> steps{};
  if (loop.empty) return;
  size_t rank = loop.shape.size();
  if (rank == 0) {
    f(offsets, steps, int64_t(1));
    return;
  }
  for (size_t k = 0; k < N; ++k) steps[k] = loop.strides[k][rank - 1];
  int64_t n = loop.shape[rank - 1];
  if (rank == 1) {
    f(offsets, steps, n);
    return;
  }
  std::vector<int64_t> index(rank - 1, 0);
  while (true) {
    f(offsets, steps, n);
    // Odometer increment over the outer dims.
    size_t d = rank - 1;
    while (d-- > 0) {
      ++index[d];
      for (size_t k = 0; k < N; ++k) offsets[k] += loop.strides[k][d];
      if (index[d] < loop.shape[d]) break;
      for (size_t k = 0; k < N; ++k) offsets[k] -= loop.strides[k][d] * loop.shape[d];
      index[d] = 0;
      if (d == 0) return;
    }
  }
}

}  // namespace symmflow::cpu
