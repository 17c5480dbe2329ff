// CPU kernels of aten::index_put and its in-place index_put_ (meta_index_put.hpp). The bool-mask
// form is kernels/index_put.cpp; integer index tensors: the output is a copy of self
// (index_put_: self itself), then each indexed element (Note [gather geometry], over the output)
// is set to its broadcast value, in row-major order of the indexing result (a repeated index
// keeps the last value, or with accumulate sums them all, in that order; bool accumulates as
// or). Every index value is checked ("index 5 is out of bounds ...").
#include "kernels/cpu/common.hpp"
#include "kernels/index_put.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

int64_t load_index(const Tensor& t, int64_t off) {
  if (t.dtype() == DType::i32) return static_cast<const int32_t*>(t.raw_data())[off];
  return static_cast<const int64_t*>(t.raw_data())[off];
}

template <typename T>
T accumulated(T old, T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return old || v;
  } else if constexpr (kIsFloat<T>) {
    return T(acc_t<T>(old) + acc_t<T>(v));
  } else {
    using U = std::make_unsigned_t<T>;
    return T(U(old) + U(v));  // wraps, as integer addition does
  }
}

// Sets (or with accumulate adds) each element of `gg.self` that `gg` indexes to its value.
void scatter(std::string_view op, const aten_meta::GatherGeometry& gg, const Tensor& values,
             bool accumulate) {
  const Tensor& self = gg.self;
  const Shape& shape = gg.spec.shape;
  // values in self's dtype, seen over the indexing result's shape (stride 0 where broadcast).
  Tensor v = as_dtype(values, self.dtype(), /*contiguous=*/true);
  Strides vs(shape.size(), 0);
  for (size_t k = 0; k < v.shape().size(); ++k) {
    const size_t d = shape.size() - v.shape().size() + k;
    if (v.shape()[k] != 1) vs[d] = v.strides()[k];
  }
  // Note [index runs]: the result's last dim is a run when no index tensor varies along it (the
  // cache's head_dim, an embedding row): its offsets are computed once per run and its elements
  // walked at fixed strides, in the same row-major order as the element-by-element walk.
  const size_t nd = shape.size();
  bool runs = nd > 0;
  for (const aten_meta::GatherIndex& gi : gg.indices) {
    runs = runs && gi.index.strides()[nd - 1] == 0;
  }
  const int64_t run = runs ? shape[nd - 1] : 1;
  const int64_t dst_step = runs ? self.strides()[nd - 1] : 0, src_step = runs ? vs[nd - 1] : 0;
  const size_t walked = runs ? nd - 1 : nd;  // dims walked one position at a time
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = static_cast<T*>(self.raw_data());
    const T* src = static_cast<const T*>(v.raw_data());
    std::vector<int64_t> idx(nd, 0);
    const int64_t positions = run == 0 ? 0 : numel(shape) / run;
    for (int64_t n = 0; n < positions; ++n) {
      int64_t o = 0, s = 0;
      for (size_t d = 0; d < walked; ++d) {
        o += idx[d] * self.strides()[d];
        s += idx[d] * vs[d];
      }
      for (const aten_meta::GatherIndex& gi : gg.indices) {
        int64_t off = 0;
        for (size_t d = 0; d < walked; ++d) off += idx[d] * gi.index.strides()[d];
        o += aten_meta::checked_index(op, load_index(gi.index, off), gi) * gi.stride;
      }
      T* to = dst + o;  // values may alias self (index_put_): no __restrict
      const T* from = src + s;
      if (accumulate) {
        for (int64_t j = 0; j < run; ++j)
          to[j * dst_step] = accumulated<T>(to[j * dst_step], from[j * src_step]);
      } else {
        for (int64_t j = 0; j < run; ++j) to[j * dst_step] = from[j * src_step];
      }
      for (size_t d = walked; d-- > 0;) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
  });
}

void index_put_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  const Tensor& values = call.arg("values").to_tensor();
  aten_meta::IndexPutGeometry g =
      aten_meta::index_put_geometry(op, self, call.arg("indices"), values);
  if (g.mask) {
    kernels::index_put_mask(call, g);
    return;
  }
  const Tensor& out = call.out(0);
  copy_into(out, self);
  scatter(op, aten_meta::index_geometry(op, out, call.arg("indices")), values,
          call.arg("accumulate").to_bool());
}

// index_put_: the integer form written into self (index_geometry refuses a mask, named).
void index_put_inplace_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  scatter(op, aten_meta::index_geometry(op, self, call.arg("indices")),
          call.arg("values").to_tensor(), call.arg("accumulate").to_bool());
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cpu, m) {
  m.impl("index_put", index_put_kernel);
  m.impl("index_put_", index_put_inplace_kernel);
}

}  // namespace symmflow::cpu
