"""Merges the JSON rows of bench_cuda_allreduce and torch_allreduce.py (measured in the same
device call) into one table: per size, symmflow (the algorithm its table picks, in place) and its
one_shot and two_shot beside NCCL and PyTorch's paths, the ratio best peer time / symmflow time
(>1: symmflow faster) and symmflow's bus bandwidth."""
import json
import sys

rows = []
for path in sys.argv[1:]:
    try:
        rows += json.load(open(path))
    except (OSError, ValueError) as e:
        print(f"table: {path}: {e}")
by = {}
for r in rows:
    by.setdefault(r["bytes"], {})[r["impl"]] = r["median_us"]
ranks = rows[0]["ranks"] if rows else 2


def fmt_bytes(b):
    return f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K" if b >= 1024 else str(b)


def cell(v):
    return f"{v:9.2f}" if v is not None else f"{'-':>9}"


print(f"all_reduce bf16 sum, {ranks} GPUs, CUDA graph replay, median us per call (slowest rank)")
print(f"{'bytes':>6} {'symmflow':>9} {'sf_1shot':>9} {'sf_2shot':>9} {'nccl':>9} {'t_nccl':>9} {'t_1shot':>9} "
      f"{'t_2shot':>9} {'best_peer':>9} {'ratio':>6} {'busbw':>7}")
for b in sorted(by):
    m = by[b]
    peers = [v for k, v in m.items() if not k.startswith("symmflow")]
    best, peer = m.get("symmflow"), (min(peers) if peers else None)
    ratio = f"{peer / best:6.2f}" if best and peer else f"{'-':>6}"
    busbw = f"{b / (best * 1e-6) / 1e9 * 2 * (ranks - 1) / ranks:7.1f}" if best else f"{'-':>7}"
    print(f"{fmt_bytes(b):>6} {cell(best)} {cell(m.get('symmflow_one_shot'))} {cell(m.get('symmflow_two_shot'))} "
          f"{cell(m.get('nccl'))} {cell(m.get('torch_nccl'))} {cell(m.get('torch_one_shot'))} "
          f"{cell(m.get('torch_two_shot'))} {cell(peer)} {ratio} {busbw}")
