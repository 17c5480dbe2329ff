"""Where the GPU time of a compiled layer goes (issue 27, item 1): per-kernel GPU time of one call.

    torchrun --nproc-per-node N tools/device/breakdown.py [--cases decoder,mlp,hf_llama,hf_qwen3]
                                                          [--iters 20]

For the decoder layer and the 8-layer MLP of examples/pytorch/tp_models.py (bf16, 16 tokens,
hidden 4096; the decoder with 32/8 heads and FFN 11008, as tools/device/torch_backend.py times
them), compiled by symmflow without its own CUDA graph (so every kernel is its own launch) and by
inductor, under torch.profiler with CUDA activities: the GPU time of each kernel per call (summed
over the calls, divided by --iters), grouped by kernel name, largest first, with the sum of kernel
time beside the wall time per call. The gap between the two is launch overhead and idle GPU. The cases hf_llama and
hf_qwen3 are transformers' stacks of examples/pytorch/hf_models.py at size "4096" (two layers,
made tensor-parallel with DTensor's parallelize_module), called on 16 token ids, as
`tools/device/sweep.py --points prefill:1x16` times them.
Rank 0 prints the tables last.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "pytorch"))
import hf_models  # noqa: E402
import tp_models  # noqa: E402

import symmflow.torch as sft  # noqa: E402  (registers the backend)
from graph_timing import join_gpu_world  # noqa: E402


def kernel_table(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        wall_us = (time.perf_counter() - start) * 1e6 / iters
    rows = {}
    kernels = []
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA or e.name.startswith("nccl:"):
            continue
        name = e.name if len(e.name) < 70 else e.name[:67] + "..."
        count, us = rows.get(name, (0, 0.0))
        rows[name] = (count + 1, us + e.device_time_total)
        kernels.append((e.time_range.start, name, e.device_time_total))
    table = sorted(((us / iters, count / iters, name) for name, (count, us) in rows.items()),
                   reverse=True)
    kernels.sort()
    return wall_us, table, kernels[:len(kernels) // iters]  # the first call's, in order


def short(name):
    """A kernel's name without its namespace and template arguments."""
    name = name.replace("void ", "").replace("symmflow::cuda::(anonymous namespace)::", "")
    return name.split("<")[0].split("(")[0]


def make_case(case, rank, world, device):
    """(model, positional inputs, keyword inputs) of one case, on `device`."""
    if case.startswith("hf_"):
        name = case[3:]
        full = hf_models.make_model(name, torch.bfloat16, size="4096", device=str(device))
        model = hf_models.parallelize(full, name, "dtensor")
        return model, [], {"input_ids": hf_models.make_input_ids(batch=1, seq=16).to(device)}
    kw = dict(hidden=4096, heads=32, kv_heads=8, ffn=11008) if case == "decoder" else \
        dict(hidden=4096)
    model = tp_models.make_model(case, torch.bfloat16, **kw).to(device)
    inputs = [t.to(device) for t in tp_models.make_inputs(
        case, torch.bfloat16, tokens=16, hidden=4096, heads=kw.get("heads", 8), rank=rank,
        world=world)]
    return model, inputs, {}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cases", default="decoder,mlp")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--top", type=int, default=14)
    args = p.parse_args()
    rank, world, device = join_gpu_world()
    out = []
    for case in args.cases.split(","):
        model, inputs, kwargs = make_case(case, rank, world, device)
        with torch.no_grad():
            for name, compile_kw in (("symmflow (no own graph)",
                                      dict(backend="symmflow", options={"cuda_graph": False})),
                                     ("inductor", {})):
                torch._dynamo.reset()
                compiled = torch.compile(model, **compile_kw)
                wall, table, first = kernel_table(lambda: compiled(*inputs, **kwargs), args.iters)
                steps = ""
                if name.startswith("symmflow"):  # the plan's steps by op, as explain names them
                    counts = collections.Counter(s["name"] for p in sft.last_report().partitions
                                                 for s in p.explain.get("steps", []))
                    steps = ", ".join(f"{n} {c}" for n, c in counts.most_common()
                                      if n not in ("aten::reshape", "aten::permute",
                                                   "aten::unsqueeze"))
                if name.startswith("symmflow"):  # the kernels of one call in launch order
                    steps += "\n  kernels in order: " + ", ".join(
                        f"{short(k)} {us:.1f}" for _, k, us in first)
                out.append((case, world, name, wall, table, steps))
    if rank == 0:
        for case, w, name, wall, table, steps in out:
            total = sum(us for us, _, _ in table)
            print(f"\n{case}, world {w}, {name}: wall {wall:.1f} us/call, kernels {total:.1f} us "
                  f"({len(table)} distinct, {sum(c for _, c, _ in table):.0f} launches/call)")
            if steps:
                print(f"  steps (views left out): {steps}")
            for us, count, kname in table[:args.top]:
                print(f"  {us:8.1f} us {count:5.1f}x  {kname}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
