// The collective matmuls of sequence parallelism (async tensor parallelism): an all-gather whose
// result feeds matmuls, and a matmul whose result is reduce-scattered, each one op so that a
// backend can hide the communication behind the GEMMs (Note [collective matmuls]). Definitions,
// symm args and shape functions; kernels in kernels/cpu/collectives/collective_matmul.cpp and
// kernels/cuda/collectives/collective_matmul.cpp; decompose_collective_matmul makes them from the graphs
// DTensor's sequence parallelism produces.
#include "symmflow/ops/group_size.hpp"
#include "symmflow/ops/library.hpp"
#include "symmflow/ops/reduce_ops.hpp"

namespace symmflow {
namespace {

// Note [collective matmuls]
// fused_all_gather_matmul(A_shard, Bs, gather_dim, group_name) -> [A, A @ Bs[0], ...] is
//   A     = the concatenation of every rank's A_shard along gather_dim (rank order)
//   out_i = A @ Bs[i]: A's leading dims kept, its last dim (K) contracted with Bs[i] ([K, N_i])
// (PyTorch's symm_mem::fused_all_gather_matmul returns (A, [out_i]); one list here, A first, as
// the IR's list returns are homogeneous). A is a result because the backward of a sequence-
// parallel layer keeps the gathered activation. Each rank's rows of A meet every B in their own
// GEMM, so a rank can multiply the rows it has while it pulls the next peer's (cuda: the pulls on
// a copy stream, the GEMMs on the compute stream, ordered by events). Only A_shard is symmetric.
//
// fused_matmul_reduce_scatter(partials, A, B, reduce_op, scatter_dim, group_name) -> out is
//   out = reduce_scatter(A @ B) along scatter_dim (rank r keeps chunk r), reduced in rank order
// (so on cpu the bits of mm, then cat, then _low_contention_reduce_scatter). Each chunk's product
// is written straight into the partials of the rank that keeps it (slot = the writer's rank): the
// push happens as the GEMM writes its tiles, and the next chunk's GEMM runs while the last one's
// stores drain; a barrier, then each rank reduces its `partials` ([W] + out's shape, symmetric,
// written) in rank order. reduce_op: "sum" or "avg".
//
// Both take floats only (the GEMMs'), a contraction dim that is not gathered or scattered
// (gather_dim / scatter_dim below the last dim), and 2-d Bs.
int64_t checked_dim(std::string_view op, std::string_view what, const Tensor& a, int64_t dim) {
  SF_CHECK(a.dim() >= 2, "{}: argument 'A' ({}) needs at least 2 dims (rows and K)", op, a.str());
  const int64_t d = dim < 0 ? dim + a.dim() : dim;
  SF_CHECK(d >= 0 && d < a.dim() - 1,
           "{}: {} {} of A ({}) must be one of its leading dims, 0 to {} (the last dim is "
           "contracted by the matmul)",
           op, what, dim, a.str(), a.dim() - 2);
  return d;
}

void check_operand(std::string_view op, std::string_view name, const Tensor& a, const Tensor& b) {
  SF_CHECK(is_floating(a.dtype()), "{}: argument 'A' is {}; the matmul takes floats", op, a.str());
  SF_CHECK(b.dim() == 2 && b.size(0) == a.size(-1) && b.dtype() == a.dtype(),
           "{}: argument '{}' is {} but must be {}[{}, N] (A's dtype, A's last dim by N)", op,
           name, b.str(), dtype_name(a.dtype()), a.size(-1));
}

std::vector<TensorSpec> all_gather_matmul_shape(std::span<const Value> a) {
  constexpr std::string_view op = "symm_mem::fused_all_gather_matmul";
  const Tensor& shard = a[0].to_tensor();
  const std::vector<Tensor>& bs = a[1].to_tensor_list();
  const int64_t d = checked_dim(op, "gather_dim", shard, a[2].to_int());
  const int64_t w = resolve_group_size(op, a[3].to_string());
  SF_CHECK(!bs.empty(), "{}: argument 'Bs' is empty (one matrix at least)", op);
  Shape gathered = shard.shape();
  gathered[size_t(d)] *= w;
  std::vector<TensorSpec> out{{shard.dtype(), gathered}};
  for (size_t i = 0; i < bs.size(); ++i) {
    check_operand(op, "Bs[" + std::to_string(i) + "]", shard, bs[i]);
    Shape s = gathered;
    s.back() = bs[i].size(1);
    out.push_back({shard.dtype(), s});
  }
  return out;
}

std::vector<TensorSpec> matmul_reduce_scatter_shape(std::span<const Value> a) {
  constexpr std::string_view op = "symm_mem::fused_matmul_reduce_scatter";
  const Tensor& partials = a[0].to_tensor();
  const Tensor& lhs = a[1].to_tensor();
  const Tensor& rhs = a[2].to_tensor();
  const std::string& reduce_op = a[3].to_string();
  SF_CHECK(reduce_op == "sum" || reduce_op == "avg",
           "{}: reduce_op '{}' is not supported (sum or avg: the partial products add up)", op,
           reduce_op);
  const int64_t d = checked_dim(op, "scatter_dim", lhs, a[4].to_int());
  const int64_t w = resolve_group_size(op, a[5].to_string());
  check_operand(op, "B", lhs, rhs);
  SF_CHECK(lhs.size(d) % w == 0,
           "{}: dim {} of A ({}) is not divisible by the group size {}", op, d, lhs.str(), w);
  Shape s = lhs.shape();
  s.back() = rhs.size(1);
  s[size_t(d)] /= w;
  Shape slots = s;
  slots.insert(slots.begin(), w);
  SF_CHECK(partials.dtype() == lhs.dtype() && partials.shape() == slots,
           "{}: argument 'partials' is {} but must be {}{} (one slot per rank of the result)", op,
           partials.str(), dtype_name(lhs.dtype()), shape_str(slots));
  return {{lhs.dtype(), s}};
}

}  // namespace

SYMMFLOW_LIBRARY(symm_mem, m) {
  m.def("fused_all_gather_matmul(Tensor A_shard, Tensor[] Bs, int gather_dim, str group_name) "
        "-> Tensor[]",
        all_gather_matmul_shape);
  m.def("fused_matmul_reduce_scatter(Tensor(a!) partials, Tensor A, Tensor B, str reduce_op, "
        "int scatter_dim, str group_name) -> Tensor",
        matmul_reduce_scatter_shape);
  m.register_symm_mem_args("fused_all_gather_matmul", {"A_shard"});
  m.register_symm_mem_args("fused_matmul_reduce_scatter", {"partials"});
  m.exchange("fused_all_gather_matmul", "pull+gemm",
             "barrier, pull each peer's rows (cuda: copy stream) while the GEMMs of the rows "
             "already here run, barrier");
  m.exchange("fused_matmul_reduce_scatter", "gemm+push",
             "barrier, each chunk's GEMM writes into the partials of the rank that keeps it, "
             "barrier, reduce own partials in rank order");
}

}  // namespace symmflow
