// CPU kernels of the mask ops (ops/aten/mask.cpp) and logical_or. They work element by element
// through doubles (core's load_double/store_double) over broadcast strides: these ops build
// [L, S] masks, so clarity wins over speed (comparisons: logic.cpp). any.dim is true where some
// element along dim is non-zero (NaN counts as non-zero).
#include <cmath>
#include <functional>

#include "kernels/cpu/common.hpp"
#include "kernels/cpu/strided.hpp"
#include "ops/aten/meta.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

// out[i] = f(inputs[0][i], inputs[1][i], ...) over out's shape, inputs broadcast to it.
void elementwise(const Tensor& out, const std::vector<Tensor>& inputs,
                 const std::function<double(const double*)>& f) {
  const Shape& shape = out.shape();
  std::vector<Strides> strides;
  for (const Tensor& t : inputs) {
    strides.push_back(broadcast_strides(t.shape(), t.strides(), shape));
  }
  std::vector<double> args(inputs.size());
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t n = 0; n < out.numel(); ++n) {
    int64_t o = 0;
    for (size_t d = 0; d < idx.size(); ++d) o += idx[d] * out.strides()[d];
    for (size_t k = 0; k < inputs.size(); ++k) {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * strides[k][d];
      args[k] = load_double(inputs[k].view(), off);
    }
    store_double(out.view(), o, f(args.data()));
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

void arange_kernel(KernelCall& call) {
  aten_meta::ArangeInfo info = aten_meta::arange_info(call.op.name(), call.arg("start"),
                                                      call.arg("end"), call.arg("step"),
                                                      call.arg("dtype"));
  const Tensor& out = call.out(0);
  for (int64_t i = 0; i < out.numel(); ++i) {
    store_double(out.view(), i * out.strides()[0], info.start + double(i) * info.step);
  }
}

Kernel logical_kernel(bool is_and) {
  return [=](KernelCall& call) {
    const Tensor& self = call.arg("self").to_tensor();
    const Tensor& other = call.arg("other").to_tensor();
    aten_meta::logical_spec(call.op.name(), self, &other);
    if (is_and) {
      elementwise(call.out(0), {self, other},
                  [](const double* x) { return x[0] != 0 && x[1] != 0 ? 1.0 : 0.0; });
    } else {
      elementwise(call.out(0), {self, other},
                  [](const double* x) { return x[0] != 0 || x[1] != 0 ? 1.0 : 0.0; });
    }
  };
}

void logical_not_kernel(KernelCall& call) {
  elementwise(call.out(0), {call.arg("self").to_tensor()},
              [](const double* x) { return x[0] == 0 ? 1.0 : 0.0; });
}

void any_kernel(KernelCall& call) {
  const Tensor& self = call.arg("self").to_tensor();
  aten_meta::ReduceInfo info = aten_meta::reduce_info(call.op.name(), self, call.arg("dim"),
                                                      call.arg("keepdim"), Value(), false);
  // Seen with the reduced dim kept as 1, the output is where each input element lands.
  SF_CHECK(call.out(0).is_contiguous(), "{}: internal: the output must be contiguous",
           call.op.name());
  Tensor out =
      call.out(0).as_strided(info.keepdim_shape, contiguous_strides(info.keepdim_shape), 0);
  fill(out, Value(false));
  Strides acc = contiguous_strides(info.keepdim_shape);
  for (size_t d = 0; d < acc.size(); ++d) {
    if (info.reduced[d]) acc[d] = 0;
  }
  std::vector<int64_t> idx(self.shape().size(), 0);
  for (int64_t n = 0; n < self.numel(); ++n) {
    int64_t in = 0, o = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      in += idx[d] * self.strides()[d];
      o += idx[d] * acc[d];
    }
    if (load_double(self.view(), in) != 0) store_double(out.view(), o, 1);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < self.shape()[d]) break;
      idx[d] = 0;
    }
  }
}

// Note [typed where]: where.self is on the backward path of every masked or clamped op of a
// training graph (ReLU's and the loss's gradients), at activation sizes, so it runs a typed
// strided loop rather than the generic one through doubles (7% of a CPU training step's
// backward).
template <typename T>
void where_typed(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Shape& shape = out.shape();
  StridedLoop<4> loop = make_loop<4>(
      shape, {out.strides(), broadcast_strides(cond.shape(), cond.strides(), shape),
              broadcast_strides(a.shape(), a.strides(), shape),
              broadcast_strides(b.shape(), b.strides(), shape)});
  T* o_base = static_cast<T*>(out.raw_data());
  const bool* c_base = static_cast<const bool*>(cond.raw_data());
  const T* a_base = static_cast<const T*>(a.raw_data());
  const T* b_base = static_cast<const T*>(b.raw_data());
  for_each_row(loop, [&](const auto& off, const auto& step, int64_t n) {
    T* __restrict o = o_base + off[0];
    const bool* __restrict c = c_base + off[1];
    const T* __restrict x = a_base + off[2];
    const T* __restrict y = b_base + off[3];
    if (step[0] == 1 && step[1] == 1 && step[2] == 1 && step[3] == 0) {
      const T yv = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : yv;
    } else if (step[0] == 1 && step[1] == 1 && step[2] == 0 && step[3] == 1) {
      const T xv = *x;
      for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? xv : y[i];
    } else {
      for (int64_t i = 0; i < n; ++i) {
        o[i * step[0]] = c[i * step[1]] ? x[i * step[2]] : y[i * step[3]];
      }
    }
  });
}

void where_kernel(KernelCall& call) {
  const Tensor& cond = call.arg("condition").to_tensor();
  const Tensor& self = call.arg("self").to_tensor();
  const Tensor& other = call.arg("other").to_tensor();
  TensorSpec spec = aten_meta::where_spec(call.op.name(), cond, self, other);
  // Both branches in the result dtype first, so each value rounds as PyTorch's promotion does.
  Tensor a = as_dtype(self, spec.dtype), b = as_dtype(other, spec.dtype);
  visit_dtype(spec.dtype, [&](auto tag) {  // Note [typed where]; the spec checked cond is bool
    where_typed<typename decltype(tag)::type>(call.out(0), cond, a, b);
  });
}

void fill_kernel(const char* arg, KernelCall& call) { fill(call.out(0), call.arg(arg)); }

}  // namespace

SYMMFLOW_LIBRARY_IMPL(aten, cpu, m) {
  m.impl("arange.start_step", arange_kernel);
  m.impl("logical_and", logical_kernel(true));
  m.impl("logical_or", logical_kernel(false));
  m.impl("logical_not", logical_not_kernel);
  m.impl("any.dim", any_kernel);
  m.impl("where.self", where_kernel);
  m.impl("full_like", [](KernelCall& call) { fill_kernel("fill_value", call); });
  m.impl("scalar_tensor", [](KernelCall& call) { fill_kernel("s", call); });
}

}  // namespace symmflow::cpu
