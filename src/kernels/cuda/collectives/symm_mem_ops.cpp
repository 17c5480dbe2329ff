// cuda kernels of the all-reduce ops of OPS.md over GPU symmetric memory, on the rank thread's
// communicator of the op's group (kernels/cuda.hpp) and the current stream:
//   one_shot_all_reduce(_out), one_shot_all_reduce_copy(_out): the one_shot kernels (input
//     pushed into every peer's staging; any output pointer);
//   two_shot_all_reduce_(_out): in place in the input's heap, algorithm by size
//     (Communicator::choose, the same on every rank); _out then copies the result to `output`;
//   multimem_*: refused, multicast is not used on these hosts.
// Symm args must be GPU symmetric tensors of the op's group (heap_of names op and argument).
// The other collectives: symm_mem_exchange.cpp, symm_mem_p2p.cpp.
#include <cuda_runtime_api.h>

#include "kernels/cuda/collectives/spanning.hpp"
#include "kernels/cuda/collectives/symm_args.hpp"
#include "runtime/cuda/check.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/kernels/cuda.hpp"
#include "symmflow/runtime/cuda_memory.hpp"
#include "symmflow/runtime/runtime.hpp"

namespace symmflow::cuda {
namespace {

void check_like(std::string_view op, std::string_view arg, const Tensor& t, const Tensor& like) {
  SF_CHECK(t.dtype() == like.dtype() && t.shape() == like.shape(),
           "{}: argument '{}' is {} but must be {} (like the input)", op, arg, t.str(),
           like.str());
  SF_CHECK(t.device() == like.device(), "{}: argument '{}' is on {} but the input is on {}", op,
           arg, t.device().str(), like.device().str());
}

void one_shot(std::string_view op, const Tensor& input, std::string_view reduce_op,
              std::string_view group_name, const Tensor& out) {
  auto group = group_for(op, group_name);
  const DeviceHeap& heap = heap_of(input, op, "input", *group);
  check_like(op, "out", out, input);
  DenseOut dst(out);
  if (group->spans_hosts()) {
    span::all_reduce(op, group, heap, input.raw_data(), dst.data(), input.numel(), input.dtype(),
                     reduce_op);
    return dst.finish();
  }
  communicator(group, input.nbytes())
      .all_reduce(input.raw_data(), dst.data(), input.numel(), input.dtype(), reduce_op,
                  current_stream(), Algo::one_shot);
  dst.finish();
}

void two_shot(std::string_view op, const Tensor& input, std::string_view reduce_op,
              std::string_view group_name, const Tensor* output) {
  auto group = group_for(op, group_name);
  const DeviceHeap& heap = heap_of(input, op, "input", *group);
  if (output) check_like(op, "output", *output, input);
  if (group->spans_hosts()) {
    span::all_reduce(op, group, heap, input.raw_data(), input.raw_data(), input.numel(),
                     input.dtype(), reduce_op);
    if (output) aten::copy_(*output, input);
    return;
  }
  const size_t offset =
      size_t(static_cast<const char*>(input.raw_data()) - static_cast<const char*>(heap.local()));
  communicator(group, input.nbytes())
      .all_reduce_inplace(heap, offset, input.numel(), input.dtype(), reduce_op, current_stream());
  if (output) aten::copy_(*output, input);
}

[[noreturn]] void refuse_multicast(std::string_view op, std::string_view instead) {
  invalid_usage("{} needs multicast (NVLink SHARP), which symmflow does not use on these hosts; "
                "use {}",
                op, instead);
}

}  // namespace

std::shared_ptr<Group> group_for(std::string_view op, std::string_view name) {
  Runtime& rt = Runtime::current();
  try {
    return rt.group(name);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", op, e.what()));
  }
}

DenseOut::DenseOut(const Tensor& out)
    : out_(out),
      dense_(out.is_contiguous() ? out
                                 : Tensor::uninitialized(out.shape(), out.dtype(), out.device())) {}

void DenseOut::finish() {
  if (dense_.raw_data() != out_.raw_data()) aten::copy_(out_, dense_);
}

// Note [reduction dtypes] (kernels/cpu/collectives/args.cpp): the GPU's reductions take f32, bf16
// and f16 (ElemType); byte-moving ops take any dtype.
static std::string reduction_dtypes(const OpDef& op, std::span<const Value> args) {
  if (op.schema().arg_index("reduce_op") < 0) return "";
  for (const Value& a : args) {
    if (!a.is_tensor()) continue;
    const DType d = a.to_tensor().dtype();
    if (d != DType::f32 && d != DType::bf16 && d != DType::f16) {
      return fmt::format("{}: dtype {} has no cuda reduction (f32, bf16, f16)", op.name(),
                         dtype_name(d));
    }
  }
  return "";
}

SYMMFLOW_LIBRARY_IMPL(symm_mem, cuda, m) {
  m.backend_check(reduction_dtypes);
  m.impl("one_shot_all_reduce", [](KernelCall& c) {
    one_shot("symm_mem::one_shot_all_reduce", c.arg(0).to_tensor(), c.arg(1).to_string(),
             c.arg(2).to_string(), c.out(0));
  });
  m.impl("one_shot_all_reduce_out", [](KernelCall& c) {
    one_shot("symm_mem::one_shot_all_reduce_out", c.arg(0).to_tensor(), c.arg(1).to_string(),
             c.arg(2).to_string(), c.arg(3).to_tensor());
  });
  m.impl("one_shot_all_reduce_copy", [](KernelCall& c) {
    aten::copy_(c.arg(0).to_tensor(), c.arg(1).to_tensor());
    one_shot("symm_mem::one_shot_all_reduce_copy", c.arg(0).to_tensor(), c.arg(2).to_string(),
             c.arg(3).to_string(), c.out(0));
  });
  m.impl("one_shot_all_reduce_copy_out", [](KernelCall& c) {
    aten::copy_(c.arg(0).to_tensor(), c.arg(1).to_tensor());
    one_shot("symm_mem::one_shot_all_reduce_copy_out", c.arg(0).to_tensor(), c.arg(2).to_string(),
             c.arg(3).to_string(), c.arg(4).to_tensor());
  });
  m.impl("two_shot_all_reduce_", [](KernelCall& c) {
    two_shot("symm_mem::two_shot_all_reduce_", c.arg(0).to_tensor(), c.arg(1).to_string(),
             c.arg(2).to_string(), nullptr);
  });
  m.impl("two_shot_all_reduce_out", [](KernelCall& c) {
    two_shot("symm_mem::two_shot_all_reduce_out", c.arg(0).to_tensor(), c.arg(1).to_string(),
             c.arg(2).to_string(), &c.arg(3).to_tensor());
  });
  m.impl("multimem_all_reduce_", [](KernelCall&) {
    refuse_multicast("symm_mem::multimem_all_reduce_", "symm_mem::two_shot_all_reduce_");
  });
  m.impl("multimem_one_shot_all_reduce", [](KernelCall&) {
    refuse_multicast("symm_mem::multimem_one_shot_all_reduce", "symm_mem::one_shot_all_reduce");
  });
  m.impl("multimem_one_shot_all_reduce_out", [](KernelCall&) {
    refuse_multicast("symm_mem::multimem_one_shot_all_reduce_out",
                     "symm_mem::one_shot_all_reduce_out");
  });
}

}  // namespace symmflow::cuda
