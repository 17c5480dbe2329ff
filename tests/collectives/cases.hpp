// Per-rank test cases of every symm_mem op, and the matrix of cases per (op, world size).
//
// Contract: run_case(ws, case) is called by every rank of ws's group, with the same case list in
// the same order; it sets up inputs (random, different per rank, integer-valued so reductions are
// exact), runs the op through the registry (symmflow::call) or the C++ entry, and checks every
// element on every rank against a naive reference (double accumulation in rank order, rounded to
// the dtype), bitwise equality across ranks where results are replicated, guard bytes around
// every symmetric tensor, and the gaps of strided outputs. It needs only the current Runtime, so
// an MPI test binary can reuse it. A failure throws std::runtime_error naming the case and rank.
#pragma once

#include <string>
#include <vector>

#include "collectives/workspace.hpp"
#include "symmflow/kernels/collectives.hpp"
#include "symmflow/ops/call.hpp"

namespace symmflow::testing {

enum class Op {
  one_shot, one_shot_out, one_shot_copy, one_shot_copy_out, two_shot, two_shot_out, all_reduce,
  reduce_scatter_out, reduce_scatter_out_last_dim, low_contention_reduce_scatter, all_gather_out,
  low_contention_all_gather, all_to_all_vdev, collective_permute, collective_permute_out,
  put_wait_signal, get, broadcast, barrier, write_value32, memset32
};

inline constexpr Op kAllOps[] = {
    Op::one_shot, Op::one_shot_out, Op::one_shot_copy, Op::one_shot_copy_out, Op::two_shot,
    Op::two_shot_out, Op::all_reduce, Op::reduce_scatter_out, Op::reduce_scatter_out_last_dim,
    Op::low_contention_reduce_scatter, Op::all_gather_out, Op::low_contention_all_gather,
    Op::all_to_all_vdev, Op::collective_permute, Op::collective_permute_out, Op::put_wait_signal,
    Op::get, Op::broadcast, Op::barrier, Op::write_value32, Op::memset32};

inline const char* op_name(Op op) {
  constexpr const char* kNames[] = {
      "one_shot_all_reduce", "one_shot_all_reduce_out", "one_shot_all_reduce_copy",
      "one_shot_all_reduce_copy_out", "two_shot_all_reduce_", "two_shot_all_reduce_out",
      "cpp_all_reduce", "reduce_scatter_out", "reduce_scatter_out_last_dim",
      "_low_contention_reduce_scatter", "all_gather_out", "_low_contention_all_gather",
      "all_to_all_vdev", "collective_permute", "collective_permute_out", "put_wait_signal", "get",
      "broadcast_", "barrier", "stream_write_value32_", "memset32_"};
  return kNames[int(op)];
}

// Ops with a reduce_op argument (reduce_scatter_out always sums).
inline bool takes_reduce_op(Op op) {
  return op <= Op::all_reduce || op == Op::low_contention_reduce_scatter;
}
inline bool uses_dtype(Op op) { return op != Op::barrier && op != Op::write_value32 && op != Op::memset32; }

struct Case {
  Op op;
  DType dtype;
  std::string reduce_op;
  int64_t numel;
  uint64_t seed;
  bool strided;  // local tensors (outputs, local inputs) strided
};

inline std::vector<Case> case_matrix(Op op, int world) {
#if defined(SYMMFLOW_TSAN)
  const std::vector<int64_t> sizes = {0, 1, 7, 1023};
  const std::vector<DType> dtypes = {DType::f32, DType::bf16, DType::i64};
  const std::vector<std::string> reduce_ops = {"sum", "max"};
  const bool large = false;
#else
  const std::vector<int64_t> sizes = {0, 1, 7, 1023, 4096 + 3};
  const std::vector<DType> dtypes = {DType::f32, DType::bf16, DType::f16,
                                     DType::f64, DType::i32,  DType::i64};
  const std::vector<std::string> reduce_ops = {"sum", "avg", "max", "min"};
  const bool large = true;
#endif
  std::vector<Case> cases;
  uint64_t seed = uint64_t(int(op)) * 1000 + uint64_t(world) * 100000;
  for (DType dt : uses_dtype(op) ? dtypes : std::vector<DType>{DType::f32}) {
    for (const std::string& rop : takes_reduce_op(op) ? reduce_ops : std::vector<std::string>{"sum"}) {
      for (int64_t n : sizes) {
        ++seed;
        cases.push_back({op, dt, rop, n, seed, seed % 3 == 0});
      }
    }
  }
  if (large && uses_dtype(op)) {
    // 1 MiB per rank: fewer combinations (sum and avg of f32 and bf16; one dtype otherwise).
    for (DType dt : {DType::f32, DType::bf16}) {
      for (std::string rop : {"sum", "avg"}) {
        if (!takes_reduce_op(op) && (dt != DType::f32 || rop != "sum")) continue;
        ++seed;
        cases.push_back({op, dt, rop, (int64_t(1) << 20) / dtype_bytes(dt), seed, seed % 2 == 0});
      }
    }
  }
  return cases;
}

// Note [fewer cases under the sanitizers]: the sanitizer trees run some matrices on f32, bf16
// and i64 with sum and max at the small sizes only: the spanning groups' (whose dtype and
// reduce-op dispatch is the one-host kernels') and the one-host matrix at 8 ranks (the full set
// runs at 1 to 4 ranks in the same tree, and every set in the release tree). Under ASan those
// were 750 of the stage's 1300 test-seconds.
inline std::vector<Case> fewer_cases(std::vector<Case> cases) {
  std::erase_if(cases, [](const Case& c) {
    const bool dtype = c.dtype == DType::f32 || c.dtype == DType::bf16 || c.dtype == DType::i64;
    const bool reduce = c.reduce_op == "sum" || c.reduce_op == "max";
    return !dtype || !reduce || c.numel > 4096 + 3;
  });
  return cases;
}

namespace detail {

// Fills any tensor (strided too) from f(i), i the row-major index.
template <typename F>
void fill_any(const Tensor& t, F&& f) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  fill(c, f);
  if (t.is_contiguous()) {
    if (t.nbytes()) std::memcpy(t.raw_data(), c.raw_data(), t.nbytes());
    return;
  }
  std::vector<int64_t> idx(t.shape().size(), 0);
  size_t elem = dtype_size(t.dtype());
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
    std::memcpy(static_cast<char*>(t.raw_data()) + off * int64_t(elem),
                static_cast<char*>(c.raw_data()) + i * int64_t(elem), elem);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.shape()[d]) break;
      idx[d] = 0;
    }
  }
}

// Rows x cols for a case of n elements per rank.
inline void rows_cols(int64_t n, int64_t* rows, int64_t* cols) {
  *cols = n < 8 ? 1 : 7;
  *rows = n < 8 ? n : n / 7;
}

inline int64_t a2a_split(uint64_t seed, int from, int to, int64_t rows, int w) {
  return int64_t(mix(seed ^ (uint64_t(from) * 131 + uint64_t(to) * 7)) % uint64_t(rows / w + 1));
}

}  // namespace detail

inline void run_all_reduce_case(Workspace& ws, const Case& c, const std::string& where);
inline void run_scatter_gather_case(Workspace& ws, const Case& c, const std::string& where);
inline void run_p2p_case(Workspace& ws, const Case& c, const std::string& where);

inline void run_case(Workspace& ws, const Case& c) {
  Group& g = ws.group();
  std::string where = fmt::format("{} {} {} numel={} W={} (rank {}, seed {}{})", op_name(c.op),
                                  dtype_name(c.dtype), c.reduce_op, c.numel, g.size(),
                                  g.global_rank(g.rank()), c.seed, c.strided ? ", strided" : "");
  if (c.op <= Op::all_reduce) {
    run_all_reduce_case(ws, c, where);
  } else if (c.op <= Op::all_to_all_vdev) {
    run_scatter_gather_case(ws, c, where);
  } else {
    run_p2p_case(ws, c, where);
  }
  ws.check_guards(where);
  g.barrier(kTestChannel, "test");  // peers are done with this case's buffers
}

}  // namespace symmflow::testing

#include "collectives/cases_impl.hpp"
