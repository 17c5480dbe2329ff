// cpu kernels of the collective matmuls (Note [collective matmuls] in
// src/ops/symm_mem/collective_matmul.cpp), exactly the composition they replace:
//   fused_all_gather_matmul: barrier, every rank's A_shard pulled into its slot of A (staggered:
//     rank r starts with itself, then r + 1, ...), barrier, then A @ Bs[i] by aten::mm on A's
//     rows, so each result has the bits of the mm it replaces.
//   fused_matmul_reduce_scatter: A @ B by aten::mm, barrier, chunk j of the product (along
//     scatter_dim) copied into slot r of rank j's partials (r this rank; j from r + 1 on, this
//     rank's own chunk last), barrier, then this rank's slots reduced in rank order: the bits of
//     mm, cat and _low_contention_reduce_scatter.
// Shapes were checked by the ops' shape functions when the call was bound; the symm args are
// checked here (symmetric, this group, contiguous) before the first barrier.
#include <memory>

#include "kernels/cpu/collectives/args.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

constexpr std::string_view kAllGatherMatmul = "symm_mem::fused_all_gather_matmul";
constexpr std::string_view kMatmulReduceScatter = "symm_mem::fused_matmul_reduce_scatter";

// A contiguous tensor of `shape` over memory this call does not own (a peer's copy).
Tensor over(void* data, const Tensor& like, const Shape& shape) {
  const size_t bytes = size_t(numel(shape)) * dtype_size(like.dtype());
  auto storage = std::make_shared<Storage>(data, bytes, like.device(), MemoryKind::regular);
  return Tensor::from_storage(std::move(storage), 0, like.dtype(), shape);
}

int64_t leading_dim(const Tensor& t, int64_t d) { return d < 0 ? d + t.dim() : d; }

// The product A @ B with A's leading dims kept.
Tensor product(const Tensor& a, const Tensor& b) {
  Shape s = a.shape();
  s.back() = b.size(1);
  return aten::reshape(aten::mm(aten::reshape(a, {-1, a.size(-1)}), b), s);
}

void all_gather_matmul(KernelCall& c) {
  const Tensor& shard = c.arg(0).to_tensor();
  const std::vector<Tensor>& bs = c.arg(1).to_tensor_list();
  const int64_t d = leading_dim(shard, c.arg(2).to_int());
  Group& g = resolve_group(kAllGatherMatmul, c.arg(3).to_string());
  SymmArg in(shard, kAllGatherMatmul, "A_shard", g);
  const int w = g.size();
  const Tensor& gathered = c.out(0);
  const int64_t rows = shard.size(d);
  fingerprint(g, kAllGatherMatmul, shard.dtype(), shard.numel());
  const CollectiveCall call{kAllGatherMatmul, {}, shard.dtype(), shard.numel(), "matrices",
                            int64_t(bs.size())};
  g.barrier(kCollectiveChannel, call);
  for (int i = 0; i < w; ++i) {
    const int p = (g.rank() + i) % w;  // staggered: ranks read different peers at once
    aten::copy_(aten::slice(gathered, d, p * rows, (p + 1) * rows),
                over(in.peer(p), shard, shard.shape()));
  }
  g.barrier(kCollectiveChannel, call);
  for (size_t i = 0; i < bs.size(); ++i) aten::copy_(c.out(i + 1), product(gathered, bs[i]));
}

void matmul_reduce_scatter(KernelCall& c) {
  const Tensor& partials = c.arg(0).to_tensor();
  const Tensor& a = c.arg(1).to_tensor();
  const ReduceOp reduce = parse_reduce_op(kMatmulReduceScatter, c.arg(3).to_string());
  const int64_t d = leading_dim(a, c.arg(4).to_int());
  Group& g = resolve_group(kMatmulReduceScatter, c.arg(5).to_string());
  ReduceFn fn = reduce_fn_checked(kMatmulReduceScatter, a.dtype(), reduce);
  SymmArg slots(partials, kMatmulReduceScatter, "partials", g);
  const int w = g.size(), r = g.rank();
  const Tensor full = product(a, c.arg(2).to_tensor());
  const Tensor& out = c.out(0);
  const int64_t chunk = out.size(d);
  const size_t slot_bytes = out.nbytes();
  fingerprint(g, kMatmulReduceScatter, a.dtype(), full.numel(), reduce_op_name(reduce));
  const CollectiveCall call{kMatmulReduceScatter, reduce_op_name(reduce), a.dtype(), full.numel()};
  g.barrier(kCollectiveChannel, call);
  for (int k = 1; k <= w; ++k) {
    const int j = (r + k) % w;  // the rank that keeps chunk j; this rank's own chunk last
    void* slot = static_cast<char*>(slots.peer(j)) + size_t(r) * slot_bytes;
    aten::copy_(over(slot, out, out.shape()), aten::slice(full, d, j * chunk, (j + 1) * chunk));
  }
  g.barrier(kCollectiveChannel, call);
  if (out.numel() == 0) return;
  RankPointers srcs(w, [&](int s) { return static_cast<char*>(slots.local()) + s * slot_bytes; });
  OutBuffer dst(out);
  fn(srcs.at(0), w, dst.data(), out.numel(), w);
  dst.finish();
}

}  // namespace

SYMMFLOW_LIBRARY_IMPL(symm_mem, cpu, m) {
  m.impl("fused_all_gather_matmul", all_gather_matmul);
  m.impl("fused_matmul_reduce_scatter", matmul_reduce_scatter);
}

}  // namespace symmflow::cpu
