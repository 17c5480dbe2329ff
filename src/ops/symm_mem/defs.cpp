// The symm_mem namespace of OPS.md: every schema, its symm args and its shape function. Every op
// that mutates returns () (unlike PyTorch, whose compiler cannot functionalize an aliasing return).
// Ops needing NVLink multicast are defined here like the rest; backends refuse them at run time.
// Kernels live in the kernels layer.
#include "symmflow/ops/group_size.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow {
namespace {

TensorSpec spec_of(const Value& v) { return {v.to_tensor().dtype(), v.to_tensor().shape()}; }

// Result shaped like argument `i`.
ShapeFn like_arg(size_t i) {
  return [i](std::span<const Value> a) { return std::vector<TensorSpec>{spec_of(a[i])}; };
}

std::vector<TensorSpec> reduce_scatter_shape(std::span<const Value> a) {
  const Tensor& t = a[0].to_tensor();
  int64_t w = resolve_group_size("symm_mem::_low_contention_reduce_scatter", a[2].to_string());
  SF_CHECK(t.dim() >= 1 && t.size(0) % w == 0,
           "symm_mem::_low_contention_reduce_scatter: dim 0 of tensor {} is not divisible by the "
           "group size {}",
           t.str(), w);
  Shape s = t.shape();
  s[0] /= w;
  return {{t.dtype(), s}};
}

std::vector<TensorSpec> all_gather_shape(std::span<const Value> a) {
  const Tensor& t = a[0].to_tensor();
  int64_t w = resolve_group_size("symm_mem::_low_contention_all_gather", a[1].to_string());
  SF_CHECK(t.dim() >= 1, "symm_mem::_low_contention_all_gather: tensor {} has no dim 0", t.str());
  Shape s = t.shape();
  s[0] *= w;
  return {{t.dtype(), s}};
}

// Note [equal all-to-all]
// all_to_all(input, group_name) is MPI_Alltoall (torch's all_to_all_single with equal splits)
// along dim 0: input's dim 0 is W blocks of size(0) / W rows each, and block p of rank q's result is
// block q of rank p's input (the result has the input's shape and dtype). Rows may have any shape,
// so a block is size(0) / W contiguous rows. It transposes blocks across ranks, which is how
// DTensor's shard-to-shard redistribution (Shard(i) -> Shard(j)) and Ulysses-style sequence
// parallelism move data; unequal splits are all_to_all_vdev's (splits in symmetric memory, read
// where the data moves). Only `input` is symmetric: each rank pulls its block from every peer
// into a local out, as all-gather does. The ranks agree on dtype, element count and row elements
// before any data moves.
std::vector<TensorSpec> all_to_all_shape(std::span<const Value> a) {
  constexpr std::string_view op = "symm_mem::all_to_all";
  const Tensor& t = a[0].to_tensor();
  int64_t w = resolve_group_size(op, a[1].to_string());
  SF_CHECK(t.dim() >= 1, "{}: argument 'input' ({}) needs at least one dimension", op, t.str());
  SF_CHECK(t.size(0) % w == 0,
           "{}: dim 0 of argument 'input' ({}) is not divisible by the group size {}", op,
           t.str(), w);
  return {spec_of(a[0])};
}

// Note [reduce to root]
// reduce_out(input, root, reduce_op, group_name, out) is MPI_Reduce / ncclReduce on symmetric
// memory: the root's out = the reduction over the ranks of input, in rank order (the bits of
// one_shot_all_reduce on the same inputs); the other ranks' out is not written (still declared
// written, so nothing reads a stale copy of it across the call). Every rank calls it with the same
// root. It is the model of a collective added in its three files (docs/architecture.md): this
// definition, src/kernels/cpu/collectives/reduce_to_root.cpp and src/kernels/cuda/collectives/reduce_to_root.cu.

// Note [fused all-reduce add rms_norm]
// fused_all_reduce_add_rms_norm(input, residual, weight, eps, reduce_op, group_name) is, exactly,
//   residual_out = aten::add.Tensor(one_shot_all_reduce(input, reduce_op, group_name), residual)
//   out          = aten::rms_norm(residual_out, [N], weight, eps)        (N = the last dim)
// with every rounding of that composition (the all-reduce rounds to the dtype, the add rounds, the
// norm accumulates 16-bit floats in f32), so fuse_allreduce_rmsnorm may rewrite the chain into it
// without changing a bit on cpu. It is the end of every tensor-parallel block; on GPUs it is one
// kernel (the sum never leaves the chip between the three steps). Float dtypes only (rms_norm).
std::vector<TensorSpec> fused_all_reduce_rms_norm_shape(std::span<const Value> a) {
  constexpr std::string_view op = "symm_mem::fused_all_reduce_add_rms_norm";
  const Tensor& input = a[0].to_tensor();
  const Tensor& residual = a[1].to_tensor();
  const Tensor& weight = a[2].to_tensor();
  SF_CHECK(is_floating(input.dtype()),
           "{}: argument 'input' is {}; the op normalizes, so it needs a floating dtype (f32, "
           "bf16, f16, f64)",
           op, input.str());
  SF_CHECK(input.dim() >= 1, "{}: argument 'input' ({}) needs at least one dim to normalize over",
           op, input.str());
  SF_CHECK(residual.dtype() == input.dtype() && residual.shape() == input.shape(),
           "{}: argument 'residual' is {} but must be {}{} (like 'input')", op, residual.str(),
           dtype_name(input.dtype()), shape_str(input.shape()));
  const Shape row{input.shape().back()};
  SF_CHECK(weight.dtype() == input.dtype() && weight.shape() == row,
           "{}: argument 'weight' is {} but must be {}{} (the last dim of 'input')", op,
           weight.str(), dtype_name(input.dtype()), shape_str(row));
  return {{input.dtype(), input.shape()}, {input.dtype(), input.shape()}};
}

}  // namespace

SYMMFLOW_LIBRARY(symm_mem, m) {
  // all-reduce
  m.def("one_shot_all_reduce(Tensor input, str reduce_op, str group_name) -> Tensor", like_arg(0));
  m.def("one_shot_all_reduce_out(Tensor input, str reduce_op, str group_name, Tensor(a!) out) -> ()");
  // Deviation from OPS.md as first written: the _copy variants copy local_input into
  // symm_buffer, so symm_buffer is annotated as written (a!); without it the compiler let later
  // readers of that value see local_input instead (found by tests/e2e).
  m.def("one_shot_all_reduce_copy(Tensor(a!) symm_buffer, Tensor local_input, str reduce_op, "
        "str group_name) -> Tensor",
        like_arg(1));
  m.def("one_shot_all_reduce_copy_out(Tensor(a!) symm_buffer, Tensor local_input, str reduce_op, "
        "str group_name, Tensor(b!) out) -> ()");
  m.def("two_shot_all_reduce_(Tensor(a!) input, str reduce_op, str group_name) -> ()");
  m.def("two_shot_all_reduce_out(Tensor(a!) input, str reduce_op, str group_name, "
        "Tensor(b!) output) -> ()");
  m.def("multimem_all_reduce_(Tensor(a!) input, str reduce_op, str group_name) -> ()");
  m.def("multimem_one_shot_all_reduce(Tensor input, str reduce_op, str group_name) -> Tensor",
        like_arg(0));
  m.def("multimem_one_shot_all_reduce_out(Tensor input, str reduce_op, str group_name, "
        "Tensor(a!) out) -> ()");
  for (const char* op : {"one_shot_all_reduce", "one_shot_all_reduce_out", "two_shot_all_reduce_",
                         "two_shot_all_reduce_out", "multimem_all_reduce_",
                         "multimem_one_shot_all_reduce", "multimem_one_shot_all_reduce_out"}) {
    m.register_symm_mem_args(op, {"input"});
  }
  m.register_symm_mem_args("one_shot_all_reduce_copy", {"symm_buffer"});
  m.register_symm_mem_args("one_shot_all_reduce_copy_out", {"symm_buffer"});
  // all-reduce + residual add + RMSNorm (Note [fused all-reduce add rms_norm])
  m.def("fused_all_reduce_add_rms_norm(Tensor input, Tensor residual, Tensor weight, float eps, "
        "str reduce_op, str group_name) -> (Tensor out, Tensor residual_out)",
        fused_all_reduce_rms_norm_shape);
  m.def("fused_all_reduce_add_rms_norm_out(Tensor input, Tensor residual, Tensor weight, "
        "float eps, str reduce_op, str group_name, Tensor(a!) out, Tensor(b!) residual_out) -> ()");
  m.register_symm_mem_args("fused_all_reduce_add_rms_norm", {"input"});
  m.register_symm_mem_args("fused_all_reduce_add_rms_norm_out", {"input"});
  m.exchange("fused_all_reduce_add_rms_norm", "one_shot+norm",
             "one_shot all-reduce, then residual add and rms_norm per row (cuda: one kernel, "
             "two_shot above the all-reduce's one-shot limit; kernels/algorithm.cpp)");
  // reduce to one rank (Note [reduce to root])
  m.def("reduce_out(Tensor input, int root, str reduce_op, str group_name, Tensor(a!) out) -> ()");
  m.register_symm_mem_args("reduce_out", {"input"});
  m.exchange("reduce_out", "push-to-root",
             "every rank's input reaches the root, which reduces them in rank order (cpu: the "
             "one_shot, kept by the root only)");

  // reduce-scatter, all-gather, all-to-all
  m.def("reduce_scatter_out(Tensor(a!) input, str group_name, bool split_last_dim, "
        "Tensor(b!) output) -> ()");
  m.def("_low_contention_reduce_scatter(Tensor tensor, str reduce_op, str group_name) -> Tensor",
        reduce_scatter_shape);
  m.def("all_gather_out(Tensor input, str group_name, Tensor(a!) out) -> ()");
  m.def("_low_contention_all_gather(Tensor tensor, str group_name) -> Tensor", all_gather_shape);
  m.def("multimem_all_gather_out(Tensor input, str group_name, Tensor(a!) out) -> ()");
  m.def("all_to_all_vdev(Tensor input, Tensor(a!) out, Tensor in_splits, "
        "Tensor(a!) out_splits_offsets, str group_name) -> ()");
  // equal splits along dim 0 (Note [equal all-to-all])
  m.def("all_to_all(Tensor input, str group_name) -> Tensor", all_to_all_shape);
  m.def("all_to_all_out(Tensor input, str group_name, Tensor(a!) out) -> ()");
  m.register_symm_mem_args("reduce_scatter_out", {"input"});
  m.register_symm_mem_args("_low_contention_reduce_scatter", {"tensor"});
  m.register_symm_mem_args("all_gather_out", {"input"});
  m.register_symm_mem_args("_low_contention_all_gather", {"tensor"});
  m.register_symm_mem_args("multimem_all_gather_out", {"out"});
  m.register_symm_mem_args("all_to_all_vdev", {"input", "out", "in_splits", "out_splits_offsets"});
  m.register_symm_mem_args("all_to_all", {"input"});
  m.register_symm_mem_args("all_to_all_out", {"input"});
  // How they move data, for explain (out variants share their functional op's).
  for (const char* op : {"all_gather_out", "_low_contention_all_gather"})
    m.exchange(op, "pull", "barrier, read every peer's input, barrier");
  for (const char* op : {"reduce_scatter_out", "_low_contention_reduce_scatter"})
    m.exchange(op, "pull-reduce", "barrier, reduce own chunk from every peer, barrier");
  for (const char* op : {"all_to_all", "all_to_all_out"})
    m.exchange(op, "pull", "barrier, read this rank's block of every peer's input, barrier");
  m.exchange("all_to_all_vdev", "pull", "barrier, read the splits and rows of every peer, barrier");

  // point to point and signals
  m.def("collective_permute(Tensor input, int shift, str group_name) -> Tensor", like_arg(0));
  m.def("collective_permute_out(Tensor input, int shift, str group_name, Tensor(a!) out) -> ()");
  m.def("put_signal(Tensor src, Tensor(a!) dst, int peer, int channel, str group_name) -> ()");
  m.def("wait_signal(Tensor(a!) dst, int peer, int channel, str group_name) -> ()");
  m.def("get(Tensor src, int peer, str group_name, Tensor(a!) out) -> ()");
  m.def("broadcast_(Tensor(a!) input, int root, str group_name) -> ()");
  m.def("barrier(str group_name, int channel=0) -> ()");
  m.def("stream_write_value32_(Tensor(a!) input, int offset, int val) -> ()");
  m.def("memset32_(Tensor(a!) input, int offset, int val, int count) -> ()");
  m.register_symm_mem_args("collective_permute_out", {"out"});
  m.register_symm_mem_args("put_signal", {"dst"});
  m.register_symm_mem_args("wait_signal", {"dst"});
  m.register_symm_mem_args("get", {"src"});
  m.register_symm_mem_args("broadcast_", {"input"});
  // Note [op tags]: collective, peer_written, in_place and out are inferred.
  m.tag("get", {Tag::one_sided, Tag::peer_read});
  m.tag("put_signal", {Tag::one_sided, Tag::signal});
  m.tag("wait_signal", {Tag::one_sided, Tag::signal});
  m.tag("barrier", {Tag::barrier});
  m.exchange("collective_permute", "push", "barrier, write into the receiver's out, barrier");
  m.exchange("broadcast_", "pull", "barrier, read the root's input, barrier");
  m.exchange("put_signal", "push+signal", "write into the peer, then raise its signal");
  m.exchange("wait_signal", "wait", "consume the peer's signal");
  m.exchange("get", "copy", "read the peer's copy");
  m.exchange("barrier", "barrier", "signal every peer, wait for every peer");
}

}  // namespace symmflow
