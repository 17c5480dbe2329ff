"""PyTorch on the 8-layer tensor-parallel MLP of issue 5 (16 tokens, hidden 4096, bf16; per layer
h = x @ W_l, then a sum all-reduce), one CUDA graph per forward, median forward time of the slowest
rank; the same shapes as bench_cuda_mlp, in the same device call. Rows: torch_mlp_nccl
(dist.all_reduce) and torch_mlp_one_shot (mm into a symmetric buffer, symm_mem.one_shot_all_reduce).
Run under torchrun, one process per GPU."""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from graph_timing import time_graph


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    group = dist.group.WORLD.group_name
    t, h = args.tokens, args.hidden
    weights = [torch.randn(h, h, dtype=torch.bfloat16, device="cuda") / 64 for _ in range(args.layers)]
    x0 = torch.full((t, h), 0.01, dtype=torch.bfloat16, device="cuda")
    symm = symm_mem.empty(t, h, dtype=torch.bfloat16, device="cuda")
    symm_mem.rendezvous(symm, group)

    def nccl():
        x = x0
        for w in weights:
            x = torch.mm(x, w)
            dist.all_reduce(x)
        return x

    def one_shot():
        x = x0
        for w in weights:
            torch.mm(x, w, out=symm)
            x = torch.ops.symm_mem.one_shot_all_reduce(symm, "sum", group)
        return x

    rows = []
    for name, fn in [("torch_mlp_nccl", nccl), ("torch_mlp_one_shot", one_shot)]:
        us = time_graph(fn, calls=1, replays=args.replays, warmup=5)
        if dist.get_rank() == 0:
            print(f"{name}: {us:.1f} us per forward", flush=True)
            rows.append({"impl": name, "median_us": us, "ranks": dist.get_world_size()})
    if dist.get_rank() == 0:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
