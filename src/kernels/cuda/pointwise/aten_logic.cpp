// cuda kernels of the aten mask, comparison, bitwise, indexing and scan ops, on the generic
// kernels of elementwise.cu: eq/ne/lt/le/gt/ge (.Tensor, .Scalar), bitwise_and/or/xor/not,
// logical_and/or/not, where.self, any.dim, arange.start_step, full_like, scalar_tensor, clamp,
// index.Tensor, index_select, gather, scatter.value and cumsum. Types and checks come from
// aten_meta, as on the CPU, and every dtype is taken. Results equal the CPU kernels' (comparisons, bitwise and logical
// ops, where, fills and gathers exactly; arange and cumsum compute in double as the CPU does). One
// difference: a GPU gather does not check its index values (Note [gather geometry]); the CPU
// raises on one out of range; likewise scatter.value (Note [scatter geometry]) skips an index out
// of range and wraps a negative one, where the CPU raises on both. Every operand must be on the GPU
// (a Scalar travels in the launch).
#include "kernels/cuda/pointwise/elementwise.hpp"
#include "kernels/cuda/pointwise/program.hpp"
#include "ops/aten/meta.hpp"
#include "ops/aten/meta_scatter.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/runtime/cuda_memory.hpp"

namespace symmflow::cuda {
namespace {

void check_rank(std::string_view op, const Shape& shape) {
  SF_CHECK(shape.size() <= size_t(kPwMaxDims), "{}: {} dimensions (the cuda kernel takes {})", op,
           shape.size(), kPwMaxDims);
}

// Launch arguments writing `out`, with the tensors of `inputs` broadcast to its shape (a null
// entry is the Scalar `scalar`, converted per Note [elementwise compute types]).
ElemArgs elem_args(std::string_view op, const Tensor& out, std::vector<const Tensor*> inputs,
                   DType compute, const Value& scalar = Value()) {
  check_rank(op, out.shape());
  ElemArgs a;
  a.out = out.raw_data();
  a.out_type = pw_type(out.dtype());
  a.ndim = int(out.dim());
  a.numel = out.numel();
  a.compute = pw_type(compute);
  for (size_t d = 0; d < out.shape().size(); ++d) {
    a.sizes[d] = out.shape()[d];
    a.out_strides[d] = out.strides()[d];
  }
  for (size_t n = 0; n < inputs.size(); ++n) {
    if (!inputs[n]) continue;
    const Tensor& t = *inputs[n];
    check_on_gpu(op, t);
    ElemOperand& o = a.in[n];
    o.data = t.raw_data();
    o.type = pw_type(t.dtype());
    const size_t lead = out.shape().size() - t.shape().size();
    for (size_t k = 0; k < t.shape().size(); ++k) {
      o.strides[lead + k] = t.shape()[k] == 1 ? 0 : t.strides()[k];
    }
  }
  if (scalar.is_number()) {
    a.c0 = scalar.to_double();
    a.i0 = scalar.is_double() ? int64_t(scalar.to_double()) : scalar.to_int();
  }
  return a;
}

void launch(ElemOp op, const ElemArgs& a) {
  SF_CUDA_CHECK(cudaError_t(launch_elementwise(op, a, current_stream())));
}

Kernel compare_kernel(ElemOp kind) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const Tensor& self = call.arg("self").to_tensor();
    const Value& other = call.arg("other");
    aten_meta::CompareInfo info = aten_meta::compare_info(op, self, other);
    const Tensor* b = other.is_tensor() ? &other.to_tensor() : nullptr;
    launch(kind, elem_args(op, call.out(0), {&self, b}, info.compute, other));
  };
}

Kernel bitwise_kernel(ElemOp kind) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const Tensor& self = call.arg("self").to_tensor();
    Value other;
    if (kind != ElemOp::bit_not) other = call.arg("other");
    TensorSpec spec = aten_meta::bitwise_spec(op, self, other);
    const Tensor* b = other.is_tensor() ? &other.to_tensor() : nullptr;
    launch(kind, elem_args(op, call.out(0), {&self, b}, spec.dtype, other));
  };
}

Kernel logical_kernel(ElemOp kind) {
  return [=](KernelCall& call) {
    const std::string& op = call.op.name();
    const Tensor& self = call.arg("self").to_tensor();
    if (kind == ElemOp::logical_not) {
      launch(kind, elem_args(op, call.out(0), {&self}, DType::f64));
      return;
    }
    const Tensor& other = call.arg("other").to_tensor();
    aten_meta::logical_spec(op, self, &other);
    launch(kind, elem_args(op, call.out(0), {&self, &other}, DType::f64));
  };
}

void where_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& cond = call.arg("condition").to_tensor();
  const Tensor& self = call.arg("self").to_tensor();
  const Tensor& other = call.arg("other").to_tensor();
  TensorSpec spec = aten_meta::where_spec(op, cond, self, other);
  launch(ElemOp::where, elem_args(op, call.out(0), {&cond, &self, &other}, spec.dtype));
}

void fill_kernel(const char* arg, KernelCall& call) {
  const Tensor& out = call.out(0);
  launch(ElemOp::fill, elem_args(call.op.name(), out, {}, out.dtype(), call.arg(arg)));
}

void arange_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  aten_meta::ArangeInfo info = aten_meta::arange_info(op, call.arg("start"), call.arg("end"),
                                                      call.arg("step"), call.arg("dtype"));
  ElemArgs a = elem_args(op, call.out(0), {}, DType::f64);
  a.c0 = info.start;
  a.c1 = info.step;
  launch(ElemOp::arange, a);
}

void any_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  aten_meta::ReduceInfo info =
      aten_meta::reduce_info(op, self, call.arg("dim"), call.arg("keepdim"), Value(), false);
  check_on_gpu(op, self);
  check_rank(op, self.shape());
  SF_CHECK(call.out(0).is_contiguous(), "{}: internal: the output must be contiguous", op);
  AnyArgs a;
  a.in = self.raw_data();
  a.in_type = pw_type(self.dtype());
  a.out = static_cast<bool*>(call.out(0).raw_data());
  a.out_numel = call.out(0).numel();
  for (size_t d = 0; d < size_t(self.dim()); ++d) {
    if (info.reduced[d]) {
      a.reduced_sizes[a.n_reduced] = self.shape()[d];
      a.reduced_strides[a.n_reduced++] = self.strides()[d];
      a.count *= self.shape()[d];
    } else {
      a.kept_sizes[a.n_kept] = self.shape()[d];
      a.kept_strides[a.n_kept++] = self.strides()[d];
    }
  }
  SF_CUDA_CHECK(cudaError_t(launch_any(a, current_stream())));
}

// The geometry of an indexing result of `shape` over g.self and g's index tensors.
GatherArgs gather_args(std::string_view op, const Shape& shape, const aten_meta::GatherGeometry& g) {
  check_rank(op, shape);
  check_on_gpu(op, g.self);
  GatherArgs a;
  a.self = g.self.raw_data();
  a.elem_size = int(dtype_size(g.self.dtype()));
  a.ndim = int(shape.size());
  a.numel = numel(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    a.sizes[d] = shape[d];
    a.self_strides[d] = g.self.strides()[d];
  }
  SF_CHECK(g.indices.size() <= size_t(kGatherMaxIndices), "{}: more than {} index tensors", op,
           kGatherMaxIndices);
  for (const aten_meta::GatherIndex& gi : g.indices) {
    check_on_gpu(op, gi.index);
    const int k = a.n_indices++;
    a.index[k] = gi.index.raw_data();
    a.index_i64[k] = gi.index.dtype() == DType::i64;
    for (size_t d = 0; d < shape.size(); ++d) a.index_strides[k][d] = gi.index.strides()[d];
    a.dim_size[k] = gi.size;
    a.dim_stride[k] = gi.stride;
  }
  return a;
}

void gather_into(std::string_view op, const Tensor& out, const aten_meta::GatherGeometry& g) {
  SF_CHECK(out.is_contiguous(), "{}: internal: the output must be contiguous", op);
  GatherArgs a = gather_args(op, out.shape(), g);
  a.out = out.raw_data();
  SF_CUDA_CHECK(cudaError_t(launch_gather(a, current_stream())));
}

}  // namespace

bool scatter_accumulates(DType d) {
  return d != DType::boolean && d != DType::i8;
}

void scatter_into(std::string_view op, const aten_meta::GatherGeometry& g, const Tensor& values,
                  bool accumulate) {
  const Shape& shape = g.spec.shape;
  SF_CHECK(values.dtype() == g.self.dtype() && values.dim() <= int64_t(shape.size()),
           "{}: internal: values must have self's dtype and at most the indexing result's rank", op);
  check_on_gpu(op, values);
  GatherArgs a = gather_args(op, shape, g);
  a.values = values.raw_data();
  if (accumulate) {
    SF_CHECK(scatter_accumulates(values.dtype()),
             "{}: accumulate=True of dtype {} has no cuda kernel", op, dtype_name(values.dtype()));
    a.accumulate = true;
    a.type = pw_type(values.dtype());
  }
  for (size_t k = 0; k < values.shape().size(); ++k) {
    const size_t d = shape.size() - values.shape().size() + k;
    if (values.shape()[k] != 1) a.values_strides[d] = values.strides()[k];
  }
  SF_CUDA_CHECK(cudaError_t(launch_gather(a, current_stream())));
}

namespace {

// out = self, then the value at each indexed element: the value goes to a 0-dim scratch tensor of
// self's dtype (one fill launch; Note [scratch inside a capture]) that scatter_into broadcasts.
// Bounds travel in the launch (i0/c0, i1/c1); computed in the result dtype.
void clamp_kernel(KernelCall& call) {
  const Tensor& out = call.out(0);
  const Tensor& self = call.arg("self").to_tensor();
  ElemArgs a = elem_args(call.op.name(), out, {&self}, out.dtype());
  const Value& lo = call.arg("min");
  const Value& hi = call.arg("max");
  auto as_int = [](const Value& v) { return v.is_int() ? v.to_int() : int64_t(v.to_double()); };
  a.has_min = !lo.is_none();
  a.has_max = !hi.is_none();
  if (a.has_min) a.c0 = lo.to_double(), a.i0 = as_int(lo);
  if (a.has_max) a.c1 = hi.to_double(), a.i1 = as_int(hi);
  launch(ElemOp::clamp, a);
}

void scatter_value_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  const Tensor& out = call.out(0);
  aten_meta::ScatterGeometry g = aten_meta::scatter_geometry(
      op, self, call.arg("dim"), call.arg("index").to_tensor(), out);
  check_on_gpu(op, self);
  aten::copy_(out, self);
  if (g.empty) return;
  Tensor value = Tensor::uninitialized({}, self.dtype(), out.device());
  launch(ElemOp::fill, elem_args(op, value, {}, self.dtype(), call.arg("value")));
  scatter_into(op, g.gather, value);
}

void cumsum_kernel(KernelCall& call) {
  const std::string& op = call.op.name();
  const Tensor& self = call.arg("self").to_tensor();
  aten_meta::CumsumInfo info = aten_meta::cumsum_info(op, self, call.arg("dim"), call.arg("dtype"));
  check_on_gpu(op, self);
  const Tensor& out = call.out(0);
  SF_CHECK(out.is_contiguous(), "{}: internal: the output must be contiguous", op);
  Tensor x = self.is_contiguous() ? self : aten::clone(self);
  SF_CUDA_CHECK(cudaError_t(launch_cumsum(x.raw_data(), pw_type(x.dtype()), out.raw_data(),
                                          pw_type(out.dtype()), info.outer, info.n, info.inner,
                                          current_stream())));
}

}  // namespace

void masked_select_into(std::string_view op, const Tensor& out, const Tensor& cond,
                        const Tensor& values, const Tensor& self) {
  launch(ElemOp::where, elem_args(op, out, {&cond, &values, &self}, out.dtype()));
}

void integer_binary(std::string_view op, aten_meta::BinaryOp kind, const Tensor& dst, DType dtype,
                    const Tensor& self, const Value& other, const Value& alpha) {
  using aten_meta::BinaryOp;
  SF_CHECK(kind != BinaryOp::div, "{}: integer true division has no integer result", op);
  const Tensor* rhs = other.is_tensor() ? &other.to_tensor() : nullptr;
  ElemArgs a = elem_args(op, dst, {&self, rhs}, dtype, rhs ? Value() : other);
  a.i1 = alpha.is_none() ? 1 : alpha.to_int();
  launch(kind == BinaryOp::add ? ElemOp::int_add
                               : kind == BinaryOp::sub ? ElemOp::int_sub : ElemOp::int_mul,
         a);
}

void integer_rsub(std::string_view op, const Tensor& dst, DType dtype, const Tensor& self,
                  const Value& other, const Value& alpha) {
  ElemArgs a = elem_args(op, dst, {nullptr, &self}, dtype, other);  // in[0]: the constant i0
  a.i1 = alpha.is_none() ? 1 : alpha.to_int();
  launch(ElemOp::int_sub, a);
}

SYMMFLOW_LIBRARY_IMPL(aten, cuda, m) {
  const std::pair<const char*, ElemOp> compares[] = {{"eq", ElemOp::eq}, {"ne", ElemOp::ne},
                                                     {"lt", ElemOp::lt}, {"le", ElemOp::le},
                                                     {"gt", ElemOp::gt}, {"ge", ElemOp::ge}};
  for (const auto& [name, kind] : compares) {
    m.impl(fmt::format("{}.Tensor", name), compare_kernel(kind));
    m.impl(fmt::format("{}.Scalar", name), compare_kernel(kind));
  }
  m.impl("bitwise_and.Tensor", bitwise_kernel(ElemOp::bit_and));
  m.impl("bitwise_and.Scalar", bitwise_kernel(ElemOp::bit_and));
  m.impl("bitwise_or.Tensor", bitwise_kernel(ElemOp::bit_or));
  m.impl("bitwise_or.Scalar", bitwise_kernel(ElemOp::bit_or));
  m.impl("bitwise_xor.Tensor", bitwise_kernel(ElemOp::bit_xor));
  m.impl("bitwise_not", bitwise_kernel(ElemOp::bit_not));
  m.impl("logical_and", logical_kernel(ElemOp::logical_and));
  m.impl("logical_or", logical_kernel(ElemOp::logical_or));
  m.impl("logical_not", logical_kernel(ElemOp::logical_not));
  m.impl("where.self", where_kernel);
  m.impl("any.dim", any_kernel);
  m.impl("arange.start_step", arange_kernel);
  m.impl("full_like", [](KernelCall& call) { fill_kernel("fill_value", call); });
  m.impl("scalar_tensor", [](KernelCall& call) { fill_kernel("s", call); });
  m.impl("index.Tensor", [](KernelCall& call) {
    gather_into(call.op.name(), call.out(0),
                aten_meta::index_geometry(call.op.name(), call.arg("self").to_tensor(),
                                          call.arg("indices")));
  });
  m.impl("index_select", [](KernelCall& call) {
    gather_into(call.op.name(), call.out(0),
                aten_meta::index_select_geometry(call.op.name(), call.arg("self").to_tensor(),
                                                 call.arg("dim"), call.arg("index").to_tensor()));
  });
  m.impl("gather", [](KernelCall& call) {
    gather_into(call.op.name(), call.out(0),
                aten_meta::gather_geometry(call.op.name(), call.arg("self").to_tensor(),
                                           call.arg("dim"), call.arg("index").to_tensor()));
  });
  m.impl("scatter.value", scatter_value_kernel);
  m.impl("clamp", clamp_kernel);
  m.impl("cumsum", cumsum_kernel);
}

}  // namespace symmflow::cuda
