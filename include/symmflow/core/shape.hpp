// Shapes and strides (in elements), with the arithmetic the rest of symmflow needs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace symmflow {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t numel(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
bool is_contiguous(const Shape& shape, const Strides& strides);
std::string shape_str(const Shape& shape);  // "[16, 4096]"
// Wraps a possibly negative dim into [0, rank); throws InvalidUsage naming `what` when out of range.
int64_t wrap_dim(int64_t dim, int64_t rank, const char* what = "dim");
// NumPy broadcasting of two shapes; throws InvalidUsage when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// Whether `from` broadcasts to `to` (NumPy's rules, trailing-aligned: each dim equal, 1 or missing).
bool broadcasts_to(const Shape& from, const Shape& to);

}  // namespace symmflow
