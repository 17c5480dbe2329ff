// cpu kernels of the collective matmuls (Note [collective matmuls] in
// src/ops/symm_mem/collective_matmul.cpp), exactly the composition they replace:
//   fused_all_gather_matmul: barrier, every rank's A_shard pulled into its slot of A (staggered:
//     rank r starts with itself, then r + 1, ...), barrier, then A @ Bs[i] by aten::mm.out on A's
//     rows, so each result has the bits of the mm it replaces.
//   fused_matmul_reduce_scatter: A @ B by aten::mm.out, barrier, chunk j of the product (along
//     scatter_dim) copied into slot r of rank j's partials (r this rank; j from r + 1 on, this
//     rank's own chunk last), barrier, then this rank's slots reduced in rank order: the bits of
//     mm, cat and _low_contention_reduce_scatter.
// Shapes were checked by the ops' shape functions when the call was bound; the symm args are
// checked here (symmetric, this group, contiguous) before the first barrier.
#include <cstring>
#include <optional>

#include "kernels/cpu/collectives/args.hpp"
#include "kernels/cpu/collectives/spanning.hpp"
#include "symmflow/ops/aten.hpp"
#include "symmflow/ops/call.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

constexpr std::string_view kAllGatherMatmul = "symm_mem::fused_all_gather_matmul";
constexpr std::string_view kMatmulReduceScatter = "symm_mem::fused_matmul_reduce_scatter";

// The leading index count before dim d and the rows of one leading index (dims d .. -2).
std::pair<int64_t, int64_t> lead_rows(const Tensor& t, int64_t d) {
  int64_t lead = 1, rows = 1;
  for (int64_t i = 0; i < t.dim() - 1; ++i) (i < d ? lead : rows) *= t.size(i);
  return {lead, rows};
}

// out (contiguous, A's leading dims by N) = A @ B, through aten::mm.out on 2-d views.
void product_into(const Tensor& out, const Tensor& a, const Tensor& b) {
  call("aten::mm.out", {aten::reshape(a, {-1, a.size(-1)}), b},
       {{"out", aten::reshape(out, {-1, out.size(-1)})}});
}

void all_gather_matmul(KernelCall& c) {
  const Tensor& shard = c.arg(0).to_tensor();
  const std::vector<Tensor>& bs = c.arg(1).to_tensor_list();
  const int64_t d = wrap_dim(c.arg(2).to_int(), shard.dim(), "gather_dim");
  Group& g = call_group(c, kAllGatherMatmul, 3);  // Note [prepared collectives] (args.hpp)
  SymmArg in(shard, kAllGatherMatmul, "A_shard", g);
  const int w = g.size();
  for (size_t i = 0; i <= bs.size(); ++i) {
    SF_CHECK(c.out(i).is_contiguous(), "{}: internal: results must be contiguous",
             kAllGatherMatmul);
  }
  const auto [lead, rows] = lead_rows(shard, d);
  const size_t slab = size_t(rows * shard.size(-1)) * dtype_size(shard.dtype());
  char* gathered = static_cast<char*>(c.out(0).raw_data());
  fingerprint(g, kAllGatherMatmul, shard.dtype(), shard.numel());
  const CollectiveCall call{kAllGatherMatmul, {}, shard.dtype(), shard.numel(), "matrices",
                            int64_t(bs.size())};
  std::optional<Exchanged> x;  // spanning.hpp: the shards through the bootstrap
  if (g.spans_hosts())
    x.emplace(g, call, in.local(), shard.nbytes());
  else
    g.barrier(kCollectiveChannel, call);
  for (int i = 0; i < w; ++i) {
    const int p = (g.rank() + i) % w;  // staggered: ranks read different peers at once
    const char* src = static_cast<const char*>(x ? x->of(p) : in.peer(p));
    for (int64_t l = 0; l < lead; ++l)  // rank p's slab of each leading index
      std::memcpy(gathered + (size_t(l) * size_t(w) + size_t(p)) * slab, src + size_t(l) * slab,
                  slab);
  }
  if (!x) g.barrier(kCollectiveChannel, call);
  for (size_t i = 0; i < bs.size(); ++i) product_into(c.out(i + 1), c.out(0), bs[i]);
}

// Chunk j of this rank's product into its slot of rank j's `slots`, between two barriers.
void push_chunks(Group& g, const CollectiveCall& call, const SymmArg& slots, const Tensor& full,
                 int64_t lead, size_t piece, size_t slot_bytes) {
  const int w = g.size(), r = g.rank();
  g.barrier(kCollectiveChannel, call);
  const char* src = static_cast<const char*>(full.raw_data());
  for (int k = 1; k <= w; ++k) {
    const int j = (r + k) % w;  // the rank that keeps chunk j; this rank's own chunk last
    char* slot = static_cast<char*>(slots.peer(j)) + size_t(r) * slot_bytes;
    for (int64_t l = 0; l < lead; ++l)
      std::memcpy(slot + size_t(l) * piece, src + (size_t(l) * size_t(w) + size_t(j)) * piece,
                  piece);
  }
  g.barrier(kCollectiveChannel, call);
}

void matmul_reduce_scatter(KernelCall& c) {
  const Tensor& partials = c.arg(0).to_tensor();
  const Tensor& a = c.arg(1).to_tensor();
  const Tensor& b = c.arg(2).to_tensor();
  const int64_t d = wrap_dim(c.arg(4).to_int(), a.dim(), "scatter_dim");
  // Note [prepared collectives] (args.hpp): the group and reduce op from the launch record.
  const Reduction red = call_reduction(c, kMatmulReduceScatter, 3, 5, a.dtype());
  const ReduceOp reduce = red.op;
  Group& g = *red.group;
  ReduceFn fn = red.fn;
  SymmArg slots(partials, kMatmulReduceScatter, "partials", g);
  const int w = g.size(), r = g.rank();
  Shape full_shape = a.shape();
  full_shape.back() = b.size(1);
  const Tensor full = Tensor::uninitialized(full_shape, a.dtype());
  product_into(full, a, b);
  const Tensor& out = c.out(0);
  const auto [lead, rows] = lead_rows(full, d);
  const size_t piece = size_t(rows / w * b.size(1)) * dtype_size(a.dtype());  // chunk of one lead
  const size_t slot_bytes = out.nbytes();
  fingerprint(g, kMatmulReduceScatter, a.dtype(), full.numel(), reduce_op_name(reduce));
  const CollectiveCall call{kMatmulReduceScatter, reduce_op_name(reduce), a.dtype(), full.numel()};
  if (g.spans_hosts()) {  // spanning.hpp: every member's product, this rank's chunk taken
    const Exchanged x(g, call, full.raw_data(), full.nbytes());
    for (int s = 0; s < w; ++s) {
      char* slot = static_cast<char*>(slots.local()) + size_t(s) * slot_bytes;
      for (int64_t l = 0; l < lead; ++l)
        std::memcpy(slot + size_t(l) * piece,
                    static_cast<const char*>(x.of(s)) + (size_t(l) * size_t(w) + size_t(r)) * piece,
                    piece);
    }
  } else {
    push_chunks(g, call, slots, full, lead, piece, slot_bytes);
  }
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
