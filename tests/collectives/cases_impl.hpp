// The per-rank case bodies of cases.hpp, by op family (contract in cases.hpp).
#pragma once

#include "collectives/cases.hpp"

namespace symmflow::testing {

inline void run_all_reduce_case(Workspace& ws, const Case& c, const std::string& where) {
  Group& g = ws.group();
  const int w = g.size(), r = g.rank();
  const int64_t n = c.numel;
  const std::string& group = ws.name();
  const bool copy = c.op == Op::one_shot_copy || c.op == Op::one_shot_copy_out;
  ws.begin(size_t((n + 5) * dtype_bytes(c.dtype)), 1, c.seed);
  Tensor in = ws.carve({copy ? n + 5 : n}, c.dtype);
  LocalOut out = LocalOut::make({n}, c.dtype, c.strided);
  LocalOut local = LocalOut::make({n}, c.dtype, c.strided);
  if (copy) {
    fill(in, [](int64_t) { return 99.0; });  // stale contents: the op must overwrite them
    detail::fill_any(local.t, [&](int64_t i) { return input_value(c.seed, r, i); });
  } else {
    fill(in, [&](int64_t i) { return input_value(c.seed, r, i); });
  }
  g.barrier(kTestChannel, "test");
  Tensor result;
  switch (c.op) {
    case Op::one_shot:
      result = call("symm_mem::one_shot_all_reduce", {in, c.reduce_op, group}).to_tensor();
      break;
    case Op::one_shot_out:
      call("symm_mem::one_shot_all_reduce_out", {in, c.reduce_op, group, out.t});
      result = out.t;
      break;
    case Op::one_shot_copy:
      result = call("symm_mem::one_shot_all_reduce_copy", {in, local.t, c.reduce_op, group})
                   .to_tensor();
      break;
    case Op::one_shot_copy_out:
      call("symm_mem::one_shot_all_reduce_copy_out", {in, local.t, c.reduce_op, group, out.t});
      result = out.t;
      break;
    case Op::two_shot:
      call("symm_mem::two_shot_all_reduce_", {in, c.reduce_op, group});
      result = in;
      break;
    case Op::two_shot_out:
      call("symm_mem::two_shot_all_reduce_out", {in, c.reduce_op, group, out.t});
      result = out.t;
      break;
    default:
      all_reduce(in, c.reduce_op, group);
      result = in;
      break;
  }
  if (result.shape() != Shape{n}) fail(fmt::format("{}: result is {}", where, result.str()));
  expect_values(result, [&](int64_t i) {
    return reduce_ref(c.reduce_op, c.dtype, w, [&](int p) { return input_value(c.seed, p, i); });
  }, where);
  expect_same_on_every_rank(g, result, where);
  out.check_gaps(where);
}

inline void run_scatter_gather_case(Workspace& ws, const Case& c, const std::string& where) {
  Group& g = ws.group();
  const int w = g.size(), r = g.rank();
  const std::string& group = ws.name();
  int64_t rows, cols;
  detail::rows_cols(c.numel, &rows, &cols);
  const int64_t elem = dtype_bytes(c.dtype);
  auto value = [&](int p, int64_t i) { return input_value(c.seed, p, i); };
  switch (c.op) {
    case Op::reduce_scatter_out:
    case Op::reduce_scatter_out_last_dim:
    case Op::low_contention_reduce_scatter: {
      const bool last = c.op == Op::reduce_scatter_out_last_dim;
      const std::string rop = c.op == Op::low_contention_reduce_scatter ? c.reduce_op : "sum";
      Shape in_shape = last ? Shape{rows, w * cols} : Shape{w * rows, cols};
      ws.begin(size_t(w * rows * cols * elem), 1, c.seed);
      Tensor in = ws.carve(in_shape, c.dtype);
      fill(in, [&](int64_t i) { return value(r, i); });
      LocalOut out = LocalOut::make({rows, cols}, c.dtype, c.strided);
      g.barrier(kTestChannel, "test");
      Tensor result = out.t;
      if (c.op == Op::low_contention_reduce_scatter) {
        result = call("symm_mem::_low_contention_reduce_scatter", {in, rop, group}).to_tensor();
      } else {
        call("symm_mem::reduce_scatter_out", {in, group, last, out.t});
      }
      expect_values(result, [&](int64_t j) {
        int64_t src = last ? (j / cols) * w * cols + r * cols + j % cols : r * rows * cols + j;
        return reduce_ref(rop, c.dtype, w, [&](int p) { return value(p, src); });
      }, where);
      out.check_gaps(where);
      return;
    }
    case Op::all_gather_out:
    case Op::low_contention_all_gather: {
      ws.begin(size_t(rows * cols * elem), 1, c.seed);
      Tensor in = ws.carve({rows, cols}, c.dtype);
      fill(in, [&](int64_t i) { return value(r, i); });
      LocalOut out = LocalOut::make({w * rows, cols}, c.dtype, c.strided);
      g.barrier(kTestChannel, "test");
      Tensor result = out.t;
      if (c.op == Op::all_gather_out) {
        call("symm_mem::all_gather_out", {in, group, out.t});
      } else {
        result = call("symm_mem::_low_contention_all_gather", {in, group}).to_tensor();
      }
      int64_t per = rows * cols;
      expect_values(result, [&](int64_t j) { return value(int(j / std::max<int64_t>(per, 1)), j % std::max<int64_t>(per, 1)); }, where);
      expect_same_on_every_rank(g, result, where);
      out.check_gaps(where);
      return;
    }
    default: {  // all_to_all_vdev
      const int64_t out_rows = rows + 3;
      ws.begin(size_t((rows + out_rows) * cols * elem + 3 * w * 8), 4, c.seed);
      Tensor in = ws.carve({rows, cols}, c.dtype);
      Tensor out = ws.carve({out_rows, cols}, c.dtype);
      Tensor splits = ws.carve({w}, DType::i64);
      Tensor meta = ws.carve({2, w}, DType::i64);
      fill(in, [&](int64_t i) { return value(r, i); });
      fill(out, [](int64_t) { return 55.0; });
      fill(splits, [&](int64_t q) { return double(detail::a2a_split(c.seed, r, int(q), rows, w)); });
      fill(meta, [](int64_t) { return -1.0; });
      g.barrier(kTestChannel, "test");
      call("symm_mem::all_to_all_vdev", {in, out, splits, meta, group});
      // Expected: the rows each peer p sends to r, packed in rank order.
      std::vector<double> want(size_t(out_rows * cols), 55.0), want_meta(size_t(2 * w));
      int64_t offset = 0;
      for (int p = 0; p < w; ++p) {
        int64_t src_row = 0;
        for (int q = 0; q < r; ++q) src_row += detail::a2a_split(c.seed, p, q, rows, w);
        int64_t n_rows = detail::a2a_split(c.seed, p, r, rows, w);
        for (int64_t k = 0; k < n_rows * cols; ++k) {
          want[size_t(offset * cols + k)] = value(p, src_row * cols + k);
        }
        want_meta[size_t(p)] = double(n_rows);
        want_meta[size_t(w + p)] = double(offset);
        offset += n_rows;
      }
      expect_values(out, [&](int64_t i) { return want[size_t(i)]; }, where + " (out)");
      expect_values(meta, [&](int64_t i) { return want_meta[size_t(i)]; }, where + " (splits)");
      return;
    }
  }
}

inline void run_p2p_case(Workspace& ws, const Case& c, const std::string& where) {
  Group& g = ws.group();
  const int w = g.size(), r = g.rank();
  const int64_t n = c.numel;
  const std::string& group = ws.name();
  const int64_t elem = dtype_bytes(c.dtype);
  auto value = [&](int p, int64_t i) { return input_value(c.seed, p, i); };
  switch (c.op) {
    case Op::collective_permute:
    case Op::collective_permute_out: {
      const int64_t shift = int64_t(c.seed % uint64_t(2 * w + 1)) - w;
      const int from = int(((r - shift) % w + w) % w);
      ws.begin(size_t(n * elem), 1, c.seed);
      Tensor out = ws.carve({n}, c.dtype);
      LocalOut in = LocalOut::make({n}, c.dtype, c.strided);
      detail::fill_any(in.t, [&](int64_t i) { return value(r, i); });
      g.barrier(kTestChannel, "test");
      Tensor result = out;
      if (c.op == Op::collective_permute) {
        result = call("symm_mem::collective_permute", {in.t, shift, group}).to_tensor();
      } else {
        call("symm_mem::collective_permute_out", {in.t, shift, group, out});
      }
      expect_values(result, [&](int64_t i) { return value(from, i); }, where);
      return;
    }
    case Op::put_wait_signal: {
      const int next = (r + 1) % w, prev = (r + w - 1) % w;
      const int64_t channel = int64_t(c.seed % uint64_t(g.channels()));
      ws.begin(size_t(n * elem), 1, c.seed);
      Tensor dst = ws.carve({n}, c.dtype);
      LocalOut src = LocalOut::make({n}, c.dtype, c.strided);
      detail::fill_any(src.t, [&](int64_t i) { return value(r, i); });
      g.barrier(kTestChannel, "test");
      call("symm_mem::put_signal", {src.t, dst, int64_t(next), channel, group});
      call("symm_mem::wait_signal", {dst, int64_t(prev), channel, group});
      expect_values(dst, [&](int64_t i) { return value(prev, i); }, where);
      g.barrier(kTestChannel, "test");  // dst is not written after this rank checked it
      return;
    }
    case Op::get: {
      const int peer = int((uint64_t(r) + 1 + c.seed) % uint64_t(w));
      ws.begin(size_t(n * elem), 1, c.seed);
      Tensor src = ws.carve({n}, c.dtype);
      fill(src, [&](int64_t i) { return value(r, i); });
      LocalOut out = LocalOut::make({n}, c.dtype, c.strided);
      g.barrier(kTestChannel, "test");
      call("symm_mem::get", {src, int64_t(peer), group, out.t});
      expect_values(out.t, [&](int64_t i) { return value(peer, i); }, where);
      out.check_gaps(where);
      return;
    }
    case Op::broadcast: {
      const int root = int(c.seed % uint64_t(w));
      ws.begin(size_t(n * elem), 1, c.seed);
      Tensor in = ws.carve({n}, c.dtype);
      fill(in, [&](int64_t i) { return value(r, i); });
      g.barrier(kTestChannel, "test");
      call("symm_mem::broadcast_", {in, int64_t(root), group});
      expect_values(in, [&](int64_t i) { return value(root, i); }, where);
      expect_same_on_every_rank(g, in, where);
      return;
    }
    case Op::barrier: {
      // Each rank publishes a value, passes the barrier, then must see every peer's value.
      const int64_t channel = int64_t(c.seed % uint64_t(g.channels()));
      ws.begin(8, 1, c.seed);
      Tensor mark = ws.carve({1}, DType::i64);
      g.barrier(kTestChannel, "test");
      mark.data<int64_t>()[0] = int64_t(c.seed) * 16 + r;
      call("symm_mem::barrier", {group, channel});
      for (int p = 0; p < w; ++p) {
        // A member on another host (a group spanning hosts) has no memory here to look at.
        const void* theirs = peer_data(mark.view(), p);
        if (!theirs) continue;
        int64_t seen = *static_cast<const int64_t*>(theirs);
        if (seen != int64_t(c.seed) * 16 + p) fail(fmt::format("{}: rank {} not seen", where, p));
      }
      return;
    }
    default: {  // stream_write_value32_ and memset32_
      ws.begin(0, 0, c.seed);
      Tensor t = Tensor::empty({n + 2}, DType::u32);
      fill(t, [](int64_t i) { return double(1000 + i); });
      const int64_t offset = int64_t(c.seed % uint64_t(n + 2));
      const int64_t count = c.op == Op::memset32 ? n + 2 - offset : 1;
      const int64_t val = int64_t(3000000000ll + int64_t(c.seed));
      if (c.op == Op::memset32) {
        call("symm_mem::memset32_", {t, offset, val, count});
      } else {
        call("symm_mem::stream_write_value32_", {t, offset, val});
      }
      expect_values(t, [&](int64_t i) {
        return i >= offset && i < offset + count ? double(val) : double(1000 + i);
      }, where);
      return;
    }
  }
}

}  // namespace symmflow::testing
