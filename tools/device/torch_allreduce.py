"""PyTorch's all-reduce paths on this host's GPUs, timed the way bench_cuda_allreduce times
symmflow: each captured as a CUDA graph of --calls calls, replayed --replays times; a sample is a
replay's time / calls on the slowest rank; the figure is the median. Run under torchrun, one
process per GPU. Rows: torch_nccl (dist.all_reduce), torch_one_shot
(symm_mem.one_shot_all_reduce, out of place) and torch_two_shot (symm_mem.two_shot_all_reduce_,
in place), all bf16 sum on a symmetric buffer (rendezvoused once)."""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from graph_timing import time_graph


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--min", type=int, default=4096)
    ap.add_argument("--max", type=int, default=256 << 20)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--replays", type=int, default=30)
    ap.add_argument("--one-shot-max", type=int, default=16 << 20)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    group = dist.group.WORLD.group_name
    elems = args.max // 2
    buf = symm_mem.empty(elems, dtype=torch.bfloat16, device="cuda")
    symm_mem.rendezvous(buf, group)
    buf.zero_()
    plain = torch.zeros(elems, dtype=torch.bfloat16, device="cuda")
    dist.all_reduce(plain[:16])
    rows = []
    size = args.min
    while size <= args.max:
        n = size // 2
        t, p = buf[:n], plain[:n]
        impls = [("torch_nccl", lambda: dist.all_reduce(p)),
                 ("torch_two_shot", lambda: torch.ops.symm_mem.two_shot_all_reduce_(t, "sum", group))]
        if size <= args.one_shot_max:
            impls.append(("torch_one_shot",
                          lambda: torch.ops.symm_mem.one_shot_all_reduce(t, "sum", group)))
        for name, fn in impls:
            try:
                us = time_graph(fn, args.calls, args.replays)
            except Exception as e:  # report, keep going
                if rank == 0:
                    print(f"{name} {size}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                continue
            if rank == 0:
                print(f"  {name:<16} {size:>10} {us:10.2f} us", flush=True)
                rows.append({"impl": name, "bytes": size, "median_us": us,
                             "ranks": dist.get_world_size(), "dtype": "bf16"})
        size *= 4
    if rank == 0:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
