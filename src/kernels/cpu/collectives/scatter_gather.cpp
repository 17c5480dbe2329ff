// cpu kernels of symm_mem reduce-scatter, all-gather and all-to-all.
//
// Contract (OPS.md, PyTorch's semantics; mutating ops return ()):
//   reduce_scatter_out(input, group, split_last_dim, output): sum over ranks in rank order; rank
//     r gets chunk r of dim 0 (of the last dim when split_last_dim). _low_contention_reduce_scatter
//     (tensor, reduce_op, group) returns chunk r of dim 0 reduced with reduce_op.
//   all_gather_out(input, group, out): out = concat of every rank's input along dim 0, pulled
//     from peers. _low_contention_all_gather returns it.
//   all_to_all_vdev(input, out, in_splits, out_splits_offsets, group): rows along dim 0; rank p
//     sends in_splits[q] rows (consecutive, in peer order) to rank q; out_splits_offsets[0] gets
//     the rows received from each peer and [1] their offsets in out (packed in rank order).
//     Every rank checks every rank's splits after the first barrier, so a bad split raises the
//     same error on every rank instead of leaving peers waiting.
//   all_to_all(input, group) and all_to_all_out(input, group, out) (Note [equal all-to-all] in
//     ops/symm_mem/defs.cpp): dim 0 in W equal blocks; block p of this rank's out is block r of
//     rank p's input (r this rank), pulled from peers. The ranks agree on dtype, element count and
//     row elements at the first barrier, so no rank reads a peer's block of another shape.
//   multimem_all_gather_out: refused (no NVLink multicast on cpu).
// Each op: barrier, read peers, barrier; shapes checked before the first barrier. On a group that
// spans hosts the barriers are one exchange of every member's input (spanning.hpp), read instead
// of the peers' memory: the same results bit for bit.
#include <cstring>
#include <optional>
#include <vector>

#include <fmt/ranges.h>

#include "kernels/cpu/collectives/args.hpp"
#include "kernels/cpu/collectives/spanning.hpp"
#include "symmflow/ops/library.hpp"

namespace symmflow::cpu {
namespace {

constexpr std::string_view kReduceScatterOut = "symm_mem::reduce_scatter_out";
constexpr std::string_view kLowContentionReduceScatter = "symm_mem::_low_contention_reduce_scatter";
constexpr std::string_view kAllGatherOut = "symm_mem::all_gather_out";
constexpr std::string_view kLowContentionAllGather = "symm_mem::_low_contention_all_gather";
constexpr std::string_view kAllToAllVdev = "symm_mem::all_to_all_vdev";
constexpr std::string_view kAllToAll = "symm_mem::all_to_all";
constexpr std::string_view kAllToAllOut = "symm_mem::all_to_all_out";

void reduce_scatter_impl(std::string_view op, const Tensor& input, std::string_view input_name,
                         Group& g, ReduceOp r, bool split_last_dim, const Tensor& output,
                         std::string_view output_name) {
  ReduceFn fn = reduce_fn_checked(op, input.dtype(), r);
  SymmArg in(input, op, input_name, g);
  const int w = g.size();
  const ScatterGeometry geo =
      check_reduce_scatter(op, input, input_name, w, split_last_dim, output, output_name);
  const int64_t chunk = geo.chunk;  // elements of one row of this rank's chunk
  const int64_t elem = int64_t(dtype_size(input.dtype()));
  fingerprint(g, op, input.dtype(), input.numel(), reduce_op_name(r));
  const CollectiveCall call{op, reduce_op_name(r), input.dtype(), input.numel(),
                            split_last_dim ? "split_last_dim" : "", split_last_dim ? 1 : 0};
  OutBuffer dst(output);
  std::optional<Exchanged> x;
  if (g.spans_hosts())
    x.emplace(g, call, in.local(), input.nbytes());
  else
    g.barrier(kCollectiveChannel, call);
  if (chunk > 0) {
    RankPointers ptrs(w, [&](int p) { return x ? x->of(p) : in.peer(p); });
    char* out = static_cast<char*>(dst.data());
    for (int64_t o = 0; o < geo.outer; ++o) {
      int64_t src = (o * geo.row_stride + g.rank() * chunk) * elem;
      fn(ptrs.at(src), w, out + o * chunk * elem, chunk, w);
    }
  }
  if (!x) g.barrier(kCollectiveChannel, call);
  dst.finish();
}

void all_gather_impl(std::string_view op, const Tensor& input, std::string_view input_name,
                     Group& g, const Tensor& out) {
  SymmArg in(input, op, input_name, g);
  const int w = g.size();
  check_all_gather(op, input, input_name, w, out);
  fingerprint(g, op, input.dtype(), input.numel());
  const CollectiveCall call{op, {}, input.dtype(), input.numel()};
  const size_t bytes = input.nbytes();
  OutBuffer dst(out);
  std::optional<Exchanged> x;
  if (g.spans_hosts())
    x.emplace(g, call, in.local(), bytes);
  else
    g.barrier(kCollectiveChannel, call);
  if (bytes > 0) {
    char* o = static_cast<char*>(dst.data());
    for (int i = 0; i < w; ++i) {
      int p = (g.rank() + i) % w;  // staggered: ranks read different peers at once
      std::memcpy(o + size_t(p) * bytes, x ? x->of(p) : in.peer(p), bytes);
    }
  }
  if (!x) g.barrier(kCollectiveChannel, call);
  dst.finish();
}

void all_to_all_impl(std::string_view op, const Tensor& input, Group& g, const Tensor& out) {
  SymmArg in(input, op, "input", g);
  const int w = g.size();
  const int64_t block = check_equal_all_to_all(op, input, w, out);
  fingerprint(g, op, input.dtype(), input.numel());
  // Equal counts and rows of equal elements: the same blocks on every rank.
  const int64_t rows = input.size(0);
  const CollectiveCall call{op, {}, input.dtype(), input.numel(), "row_elements",
                            rows > 0 ? input.numel() / rows : 0};
  OutBuffer dst(out);
  std::optional<Exchanged> x;
  if (g.spans_hosts())
    x.emplace(g, call, in.local(), input.nbytes());
  else
    g.barrier(kCollectiveChannel, call);
  if (block > 0) {
    char* o = static_cast<char*>(dst.data());
    const int64_t mine = int64_t(g.rank()) * block;
    for (int i = 0; i < w; ++i) {
      int p = (g.rank() + i) % w;  // staggered: ranks read different peers at once
      std::memcpy(o + int64_t(p) * block,
                  static_cast<const char*>(x ? x->of(p) : in.peer(p)) + mine, size_t(block));
    }
  }
  if (!x) g.barrier(kCollectiveChannel, call);
  dst.finish();
}

// Rows of every (sender, receiver) pair; throws the same error on every rank when a split is
// negative or does not fit.
void check_splits(std::string_view op, const Group& g, const std::vector<const int64_t*>& splits,
                  int64_t in_rows, int64_t out_rows) {
  const int w = g.size();
  for (int p = 0; p < w; ++p) {
    int64_t sent = 0;
    for (int q = 0; q < w; ++q) {
      SF_CHECK(splits[size_t(p)][q] >= 0, "{}: rank {} has in_splits[{}] = {} (negative)", op,
               g.global_rank(p), q, splits[size_t(p)][q]);
      sent += splits[size_t(p)][q];
    }
    SF_CHECK(sent <= in_rows, "{}: rank {} sends {} rows in total but 'input' has {} rows", op,
             g.global_rank(p), sent, in_rows);
  }
  for (int q = 0; q < w; ++q) {
    int64_t received = 0;
    for (int p = 0; p < w; ++p) received += splits[size_t(p)][q];
    SF_CHECK(received <= out_rows, "{}: rank {} receives {} rows in total but 'out' has {} rows",
             op, g.global_rank(q), received, out_rows);
  }
}

void all_to_all_vdev_impl(const Tensor& input, const Tensor& out, const Tensor& in_splits,
                          const Tensor& out_splits_offsets, Group& g) {
  constexpr std::string_view op = kAllToAllVdev;
  SymmArg in(input, op, "input", g);
  SymmArg o(out, op, "out", g);
  SymmArg splits_arg(in_splits, op, "in_splits", g);
  SymmArg meta(out_splits_offsets, op, "out_splits_offsets", g);
  const int w = g.size();
  const int64_t row_bytes = check_all_to_all(op, input, out, in_splits, out_splits_offsets, w);
  fingerprint(g, op, input.dtype(), input.numel());
  // Row counts are the splits' business (check_splits): the ranks agree on the element type and
  // the elements of one row.
  const CollectiveCall call{op,        {}, input.dtype(), 0, "row_elements",
                            row_bytes / int64_t(dtype_size(input.dtype()))};
  // Spanning hosts: every member's splits, then its input rows, in one exchange.
  std::optional<Exchanged> x;
  const size_t split_bytes = size_t(w) * sizeof(int64_t);
  if (g.spans_hosts()) {
    std::string mine(split_bytes + input.nbytes(), '\0');
    std::memcpy(mine.data(), splits_arg.local(), split_bytes);
    if (input.nbytes() > 0) std::memcpy(mine.data() + split_bytes, in.local(), input.nbytes());
    x.emplace(g, call, mine.data(), mine.size());
  } else {
    g.barrier(kCollectiveChannel, call);
  }
  auto rows_of = [&](int p) -> const char* {
    return x ? static_cast<const char*>(x->of(p)) + split_bytes
             : static_cast<const char*>(in.peer(p));
  };
  std::vector<const int64_t*> splits(static_cast<size_t>(w));
  for (int p = 0; p < w; ++p)
    splits[size_t(p)] = static_cast<const int64_t*>(x ? x->of(p) : splits_arg.peer(p));
  check_splits(op, g, splits, input.size(0), out.size(0));
  const int me = g.rank();
  auto* result = static_cast<int64_t*>(meta.local());
  char* dst = static_cast<char*>(o.local());
  int64_t offset = 0;
  for (int p = 0; p < w; ++p) {
    int64_t src_row = 0;
    for (int q = 0; q < me; ++q) src_row += splits[size_t(p)][q];
    int64_t rows = splits[size_t(p)][me];
    if (rows > 0) {
      std::memcpy(dst + offset * row_bytes, rows_of(p) + src_row * row_bytes,
                  size_t(rows * row_bytes));
    }
    result[p] = rows;
    result[w + p] = offset;
    offset += rows;
  }
  if (!x) g.barrier(kCollectiveChannel, call);
}

SYMMFLOW_LIBRARY_IMPL(symm_mem, cpu, m) {
  // Note [prepared collectives] (args.hpp): the group and reduce op from the launch record.
  m.impl("reduce_scatter_out", [](KernelCall& c) {
    constexpr std::string_view op = kReduceScatterOut;
    reduce_scatter_impl(op, c.arg(0).to_tensor(), "input", call_group(c, op, 1), ReduceOp::sum,
                        c.arg(2).to_bool(), c.arg(3).to_tensor(), "output");
  });
  m.impl("_low_contention_reduce_scatter", [](KernelCall& c) {
    constexpr std::string_view op = kLowContentionReduceScatter;
    const Tensor& t = c.arg(0).to_tensor();
    const Reduction red = call_reduction(c, op, 1, 2, t.dtype());
    reduce_scatter_impl(op, t, "tensor", *red.group, red.op, false, c.out(0), "result");
  });
  m.impl("all_gather_out", [](KernelCall& c) {
    all_gather_impl(kAllGatherOut, c.arg(0).to_tensor(), "input",
                    call_group(c, kAllGatherOut, 1), c.arg(2).to_tensor());
  });
  m.impl("_low_contention_all_gather", [](KernelCall& c) {
    all_gather_impl(kLowContentionAllGather, c.arg(0).to_tensor(), "tensor",
                    call_group(c, kLowContentionAllGather, 1), c.out(0));
  });
  m.impl("multimem_all_gather_out", [](KernelCall&) {
    refuse_multicast("symm_mem::multimem_all_gather_out", "symm_mem::all_gather_out");
  });
  m.impl("all_to_all", [](KernelCall& c) {
    all_to_all_impl(kAllToAll, c.arg(0).to_tensor(), call_group(c, kAllToAll, 1), c.out(0));
  });
  m.impl("all_to_all_out", [](KernelCall& c) {
    all_to_all_impl(kAllToAllOut, c.arg(0).to_tensor(), call_group(c, kAllToAllOut, 1),
                    c.arg(2).to_tensor());
  });
  m.impl("all_to_all_vdev", [](KernelCall& c) {
    all_to_all_vdev_impl(c.arg(0).to_tensor(), c.arg(1).to_tensor(), c.arg(2).to_tensor(),
                         c.arg(3).to_tensor(), call_group(c, kAllToAllVdev, 4));
  });
}

}  // namespace
}  // namespace symmflow::cpu
