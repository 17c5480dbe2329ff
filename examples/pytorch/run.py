"""A tensor-parallel PyTorch model through torch.compile(backend="symmflow"), checked and timed.

    torchrun --nproc-per-node 4 examples/pytorch/run.py --case decoder --dtype f32

Every rank builds the model of tp_models.py (its shard of seeded weights), runs it eagerly and
compiled by symmflow, and checks every element of the compiled result against eager within the
dtype's tolerance. Rank 0 prints symmflow's report (partitions, boundaries, and each plan as
`symmflow explain` prints it), then the median time per call of eager, symmflow and, with
--inductor, torch.compile's default backend, in the same run, with the ratios. Exits non-zero on a
mismatch. Cases: mlp, decoder, decoder_sp, input_allreduce, inplace_allreduce, ring.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tp_models  # noqa: E402

import symmflow.torch as sft  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 3e-2}


def median_us(fn, iters: int, sync) -> float:
    times = []
    for _ in range(iters):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", default="decoder")
    p.add_argument("--dtype", default="f32", choices=sorted(DTYPES))
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--inductor", action="store_true", help="also time torch.compile's default")
    p.add_argument("--device", default="cpu")
    args = p.parse_args()

    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{rank % torch.cuda.device_count()}") if args.device == "cuda" \
        else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dtype = DTYPES[args.dtype]
    sft.init()
    model = tp_models.make_model(args.case, dtype, hidden=args.hidden).to(device)
    inputs = [t.to(device) for t in tp_models.make_inputs(args.case, dtype, tokens=args.tokens,
                                                          hidden=args.hidden, rank=rank,
                                                          world=world)]
    sync = (lambda: torch.cuda.synchronize()) if device.type == "cuda" else (lambda: None)
    with torch.no_grad():
        want = model(*inputs)
        report = sft.explain(model, *inputs, print_report=rank == 0)
        compiled = torch.compile(model, backend="symmflow")
        got = compiled(*inputs)
    err = (got.float() - want.float()).abs().max().item()
    tol = TOLERANCE[dtype] * max(want.float().abs().max().item(), 1.0)
    ok = err <= tol
    errs = [None] * world
    dist.all_gather_object(errs, (err, ok))
    timings = {}
    with torch.no_grad():
        timings["eager"] = median_us(lambda: model(*inputs), args.iters, sync)
        timings["symmflow"] = median_us(lambda: compiled(*inputs), args.iters, sync)
        if args.inductor:
            torch._dynamo.reset()
            inductor = torch.compile(model)
            inductor(*inputs)
            timings["inductor"] = median_us(lambda: inductor(*inputs), args.iters, sync)
    if rank == 0:
        print(f"\n{args.case} {args.dtype} on {world} ranks ({device.type}): "
              f"{report.partition_count} partition(s), {len(report.boundaries)} boundary(ies), "
              f"{report.copies_added()} copies added")
        for r, (e, good) in enumerate(errs):
            print(f"  rank {r}: max |compiled - eager| = {e:.3g} ({'ok' if good else 'MISMATCH'})")
        print(f"  median per call over {args.iters} calls:")
        for name, us in timings.items():
            print(f"    {name:9s} {us:10.1f} us   eager/{name} = {timings['eager'] / us:.2f}x")
    dist.destroy_process_group()
    return 0 if all(good for _, good in errs) else 1


if __name__ == "__main__":
    sys.exit(main())
