// Dtype-converting strided copy, fill and destination helpers of the CPU kernels (common.hpp).
#include "kernels/cpu/common.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "kernels/cpu/strided.hpp"

namespace symmflow::cpu {
namespace {

template <typename To, typename From>
void copy_typed(const Tensor& dst, const Tensor& src) {
  StridedLoop<2> loop = make_loop<2>(
      dst.shape(), {dst.strides(), broadcast_strides(src.shape(), src.strides(), dst.shape())});
  To* d = static_cast<To*>(dst.raw_data());
  const From* s = static_cast<const From*>(src.raw_data());
  for_each_row(loop, [&](const auto& off, const auto& step, int64_t n) {
    To* __restrict o = d + off[0];
    const From* __restrict x = s + off[1];
    if (step[0] == 1 && step[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = convert<To>(x[i]);
    } else if (step[0] == 1 && step[1] == 0) {
      To v = convert<To>(*x);
      for (int64_t i = 0; i < n; ++i) o[i] = v;
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * step[0]] = convert<To>(x[i * step[1]]);
    }
  });
}

// The [lo, hi) byte range a tensor's elements can occupy.
std::pair<uintptr_t, uintptr_t> byte_range(const Tensor& t) {
  auto base = reinterpret_cast<uintptr_t>(t.raw_data());
  if (t.numel() == 0) return {base, base};
  int64_t last = 0;
  for (size_t d = 0; d < t.shape().size(); ++d) last += (t.shape()[d] - 1) * t.strides()[d];
  return {base, base + uintptr_t((last + 1) * int64_t(dtype_size(t.dtype())))};
}

}  // namespace

void copy_into(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.shape() == src.shape() && dst.is_contiguous() &&
      src.is_contiguous()) {
    if (dst.raw_data() != src.raw_data()) std::memcpy(dst.raw_data(), src.raw_data(), dst.nbytes());
    return;
  }
  visit_dtype(dst.dtype(), [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    visit_dtype(src.dtype(), [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      copy_typed<To, From>(dst, src);
    });
  });
}

bool may_overlap(const Tensor& a, const Tensor& b) {
  if (!a.storage() || a.storage() != b.storage()) return false;
  auto [a_lo, a_hi] = byte_range(a);
  auto [b_lo, b_hi] = byte_range(b);
  return a_lo < b_hi && b_lo < a_hi;
}

void copy_from(const Tensor& dst, const Tensor& src) {
  bool same_layout = dst.raw_data() == src.raw_data() && dst.shape() == src.shape() &&
                     dst.strides() == src.strides();
  if (may_overlap(dst, src) && !same_layout) {
    Tensor snapshot = Tensor::empty(src.shape(), src.dtype());
    copy_into(snapshot, src);
    copy_into(dst, snapshot);
    return;
  }
  copy_into(dst, src);
}

Tensor scratch_tensor(const Shape& shape, DType dtype, int slot) {
  // Large fresh allocations are mmap'ed and fault in page by page on every call; a per-thread
  // buffer that only grows keeps repeated conversions (bf16 matmul operands) off that path.
  thread_local std::array<std::shared_ptr<Storage>, 4> pool;
  std::shared_ptr<Storage>& s = pool.at(size_t(slot));
  size_t bytes = size_t(numel(shape)) * dtype_size(dtype);
  if (!s || s.use_count() > 1 || s->bytes() < bytes) s = Storage::allocate_host(bytes, false);
  return Tensor::from_storage(s, 0, dtype, shape);
}

Tensor as_dtype(const Tensor& t, DType dtype, bool contiguous) {
  if (t.dtype() == dtype && (!contiguous || t.is_contiguous())) return t;
  Tensor out = Tensor::empty(t.shape(), dtype);
  copy_into(out, t);
  return out;
}

void fill(const Tensor& dst, const Value& value) {
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v = scalar_as<T>(value);
    StridedLoop<1> loop = make_loop<1>(dst.shape(), {dst.strides()});
    T* d = static_cast<T*>(dst.raw_data());
    for_each_row(loop, [&](const auto& off, const auto& step, int64_t n) {
      T* __restrict o = d + off[0];
      if (step[0] == 1) {
        std::fill(o, o + n, v);
      } else {
        for (int64_t i = 0; i < n; ++i) o[i * step[0]] = v;
      }
    });
  });
}

Destination::Destination(const Tensor& out, DType dtype, bool need_contiguous) : out_(out) {
  if (out.dtype() == dtype && (!need_contiguous || out.is_contiguous())) {
    tensor_ = out;
  } else {
    tensor_ = Tensor::empty(out.shape(), dtype);
  }
}

void Destination::finish() const {
  if (tensor_.raw_data() != out_.raw_data() || tensor_.dtype() != out_.dtype()) {
    copy_into(out_, tensor_);
  }
}

}  // namespace symmflow::cpu
