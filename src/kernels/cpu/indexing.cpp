// CPU kernels of index.Tensor, index_select, gather (Note [gather geometry] in ops/aten/meta.hpp),
// scatter.value (Note [scatter geometry] in ops/aten/meta_scatter.hpp) and cumsum. The gathers copy elements by their byte size (no conversion: the result has self's
// dtype), checking every index value ("index 5 is out of bounds for dimension 0 with size 3").
// scatter.value copies self into the output, then writes the value (converted to self's dtype, as
// PyTorch's fill does) at each indexed element, checking each index value as PyTorch's scatter
// does (no wrapping of negative values).
// cumsum converts self to the result dtype first (PyTorch's self.to(dtype)) and accumulates along
// dim in double for floating results and in int64 for integer results.
#include <cstring>

#include "kernels/cpu/common.hpp"
#include "ops/aten/meta.hpp"
#include "ops/aten/meta_scatter.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

int64_t load_index(const Tensor& t, int64_t off) {
  if (t.dtype() == DType::i32) return static_cast<const int32_t*>(t.raw_data())[off];
  return static_cast<const int64_t*>(t.raw_data())[off];
}

void gather_into(const std::string& op, const Tensor& out, const aten_meta::GatherGeometry& g) {
  const Shape& shape = out.shape();
  const size_t esize = dtype_size(out.dtype());
  auto* dst = static_cast<char*>(out.raw_data());
  const auto* src = static_cast<const char*>(g.self.raw_data());
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t n = 0; n < out.numel(); ++n) {
    int64_t o = 0, s = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      o += idx[d] * out.strides()[d];
      s += idx[d] * g.self.strides()[d];
    }
    for (const aten_meta::GatherIndex& gi : g.indices) {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * gi.index.strides()[d];
      s += aten_meta::checked_index(op, load_index(gi.index, off), gi) * gi.stride;
    }
    std::memcpy(dst + o * int64_t(esize), src + s * int64_t(esize), esize);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

void index_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  gather_into(op, call.out(0),
              aten_meta::index_geometry(op, call.arg("self").to_tensor(), call.arg("indices")));
}

void index_select_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  gather_into(op, call.out(0),
              aten_meta::index_select_geometry(op, call.arg("self").to_tensor(), call.arg("dim"),
                                               call.arg("index").to_tensor()));
}

void gather_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  gather_into(op, call.out(0),
              aten_meta::gather_geometry(op, call.arg("self").to_tensor(), call.arg("dim"),
                                         call.arg("index").to_tensor()));
}

void scatter_value_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  const Tensor& out = call.out(0);
  aten_meta::ScatterGeometry g = aten_meta::scatter_geometry(
      op, self, call.arg("dim"), call.arg("index").to_tensor(), out);
  copy_into(out, self);
  if (g.empty) return;
  const aten_meta::GatherIndex& gi = g.gather.indices[0];
  const Shape& shape = gi.index.shape();
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T value = scalar_as<T>(call.arg("value"));
    T* dst = static_cast<T*>(g.gather.self.raw_data());
    std::vector<int64_t> idx(shape.size(), 0);
    for (int64_t n = 0; n < gi.index.numel(); ++n) {
      int64_t o = 0, i = 0;
      for (size_t d = 0; d < idx.size(); ++d) {
        o += idx[d] * g.gather.self.strides()[d];
        i += idx[d] * gi.index.strides()[d];
      }
      dst[o + aten_meta::checked_scatter_index(op, load_index(gi.index, i), gi) * gi.stride] = value;
      for (size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
  });
}

void cumsum_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  aten_meta::CumsumInfo info =
      aten_meta::cumsum_info(call.op.name(), self, call.arg("dim"), call.arg("dtype"));
  const Tensor& out = call.out(0);
  SF_CHECK(out.is_contiguous(), "{}: internal: the output must be contiguous", call.op.name());
  Tensor x = as_dtype(self, info.spec.dtype, true);
  visit_dtype(info.spec.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = std::conditional_t<kIsFloat<T>, double, int64_t>;
    const T* in = static_cast<const T*>(x.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    for (int64_t a = 0; a < info.outer; ++a) {
      for (int64_t c = 0; c < info.inner; ++c) {
        A acc = 0;
        for (int64_t k = 0; k < info.n; ++k) {
          const int64_t at = (a * info.n + k) * info.inner + c;
          acc = A(acc + convert<A>(in[at]));
          o[at] = convert<T>(acc);
        }
      }
    }
  });
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cpu, m) {
  m.impl("index.Tensor", index_kernel);
  m.impl("index_select", index_select_kernel);
  m.impl("gather", gather_kernel);
  m.impl("scatter.value", scatter_value_kernel);
  m.impl("cumsum", cumsum_kernel);
}

}  // namespace symmflow::cpu
