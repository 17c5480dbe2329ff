"""Writes the sequence-parallel block of tests/support/graphs.cpp (sequence_parallel_text) at a
size and rank count W (argv[2], default 2), for `tools/device/sf.sh sp`: `check` (small, f32, for
--check) or `big` (bf16, hidden 4096, 2 x 2048 tokens: x [2, 2048 / W, 4096], q/k projections
4096 -> 4096 / W, the row-parallel 4096 / W -> 4096) or `t<T>` (the same with T tokens in all:
x [2, T / 2 / W, 4096])."""
import sys

w = int(sys.argv[2]) if len(sys.argv) > 2 else 2
size = sys.argv[1]
tokens = 4096 if size == "big" else int(size[1:]) if size.startswith("t") else 0
B, s, H, N, dt = ((2, 24, 64, 32, "f32") if size == "check"
                  else (2, tokens // 2 // w, 4096, 4096 // w, "bf16"))
p = ", ".join(f"p{i}" for i in range(w))
c = ", ".join(f"c{i}" for i in range(w))
print(f"""group tp
graph sp(x: {dt}[{B}, {s}, {H}], wq: {dt}[{N}, {H}], wk: {dt}[{N}, {H}], wo: {dt}[{N}, {H}]) {{
  g = symm_mem::_low_contention_all_gather(x, "tp")
  {p} = aten::split_with_sizes(g, [{", ".join([str(B)] * w)}])
  cat = aten::cat([{p}], 1)
  flat = aten::reshape(cat, [{B * s * w}, {H}])
  pq = aten::permute(wq, [1, 0])
  q = aten::mm(flat, pq)
  pk = aten::permute(wk, [1, 0])
  k = aten::mm(flat, pk)
  h = aten::mul.Tensor(q, k)
  m = aten::mm(h, wo)
  v = aten::reshape(m, [{B}, {s * w}, {H}])
  {c} = aten::split_with_sizes(v, [{", ".join([str(s)] * w)}], 1)
  cc = aten::cat([{c}])
  r = symm_mem::_low_contention_reduce_scatter(cc, "sum", "tp")
  return r, flat
}}""")
