"""What torch.compile itself costs a call of a transformers model made tensor-parallel with DTensor,
outside any backend's work (issue 27: the host time of transformers' stacks, docs/cuda.md).

    torchrun --nproc-per-node 1 tools/compile_host_cost.py [--model llama] [--style dtensor|none]

The model of examples/pytorch/hf_models.py (small, f32, CPU) is compiled with AOT autograd around
a graph whose outputs are computed once and then handed back as they are, so a call's time is
dynamo's guards, transformers' Python around the graph, AOT's wrappers (DTensor's unwrapping) and
the output classes: what every backend pays before and after its own work. Prints the median of
--iters calls and the functions that took the most time of their own under cProfile.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch._dynamo.backends.common import aot_autograd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "pytorch"))
import hf_models  # noqa: E402


def cached_outputs(gm, example_inputs):
    outs = None

    def run(*args):
        nonlocal outs
        if outs is None:
            outs = gm(*args)
        return list(outs)

    return run


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="llama")
    p.add_argument("--style", default="dtensor", choices=["dtensor", "none"])
    p.add_argument("--iters", type=int, default=500)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = hf_models.make_model(args.model, torch.float32)
    if args.style != "none":
        model = hf_models.parallelize(model, args.model, args.style)
    ids = hf_models.make_input_ids(batch=1, seq=16)
    with torch.no_grad():
        compiled = torch.compile(model, backend=aot_autograd(fw_compiler=cached_outputs))
        for _ in range(10):
            compiled(input_ids=ids)
        times = []
        for _ in range(args.iters):
            start = time.perf_counter()
            compiled(input_ids=ids)
            times.append((time.perf_counter() - start) * 1e6)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.iters):
            compiled(input_ids=ids)
        profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(15)
    if dist.get_rank() == 0:
        print(text.getvalue())
        print(f"compile_host_cost: {args.model}, style {args.style}, world "
              f"{dist.get_world_size()}: {statistics.median(times):.1f} us a call with the graph's "
              f"outputs cached (median of {args.iters})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
