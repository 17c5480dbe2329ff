"""The shape sweep (issue 40, item 1): transformers models made tensor-parallel with DTensor, timed
at the shapes users run, each point beside PyTorch eager, inductor and inductor's
reduce-overhead in the same processes, every compiled result checked against eager's.

    torchrun --nproc-per-node N tools/device/sweep.py [--models llama,qwen3] [--size 4096]
        [--points prefill:1x128,...] [--modes eager,symmflow,...] [--dtype bf16] [--out F.jsonl]

Points (comma-separated; the GPU defaults are the issue's):
  prefill:BxS   forward of B sequences of S tokens under no_grad; checks the logits;
  decode:B@KV   one token for B sequences with a StaticCache already holding KV tokens (filled by
                eager; each call sets the cache's length back to KV first, one fill a layer
                outside the compiled call, and a sliding window's contents); checks the step's
                logits;
  train:BxS     forward, backward and AdamW on B sequences of S tokens, the labels the inputs; each
                mode trains its own copy from the same weights; checks the first two steps' losses.
Modes: eager, symmflow, symmflow-ro (mode="reduce-overhead"), inductor, inductor-ro. On the CPU,
reduce-overhead is PyTorch's pass-through and the -ro modes are left out.

Times are medians of --iters synchronised calls (or steps) after --warmup; beside them each
mode's peak GPU memory (torch.cuda.max_memory_allocated, reset before the mode runs). Rank 0 prints
a table per point: ms per mode, symmflow's better mode against inductor's better mode, the error
against eager (relative to eager's largest logit, or the loss), and symmflow's partitions. A mode
that fails is named with its error and the sweep goes on. Every row also goes to --out as JSON.
--profile MODES prints those modes' GPU time per kernel (--out also keeps each kernel of one
call in launch order), --host-profile MODES their host time by Python function (cProfile), and
--loop N the time of N calls back to back without synchronising (as a serving loop issues decode
steps: ms a call, and how long the host took to issue each); rank 0 ends with the GPU kernels that
symmflow chose by measurement (symmflow.kernel_choices()).
On a GPU machine: `bash tools/device/sf.sh build sweep [ARGS]` builds the package and runs this;
on CPUs: --device cpu --size cpu512 --dtype f32.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
import traceback

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "pytorch"))
import hf_models  # noqa: E402

GPU_POINTS = ("prefill:1x128,prefill:1x512,prefill:1x2048,prefill:1x8192,prefill:4x512,"
              "decode:1@1024,decode:8@1024,decode:64@1024,decode:1@8192,decode:8@8192,"
              "decode:64@8192,decode:1@32768,decode:8@32768,"
              "train:1x512,train:2x512,train:4x512,train:1x2048,train:2x2048,train:4x2048")
CPU_POINTS = "prefill:1x1024,train:4x256,decode:1@1024"
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def parse_point(text: str) -> tuple[str, int, int]:
    kind, _, shape = text.partition(":")
    sep = "@" if kind == "decode" else "x"
    if kind not in ("prefill", "decode", "train") or sep not in shape:
        raise ValueError(f"bad point '{text}': prefill:BxS, decode:B@KV or train:BxS")
    batch, length = shape.split(sep)
    return kind, int(batch), int(length)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn, device, iters: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def compiled(model, mode: str):
    torch._dynamo.reset()
    if mode == "eager":
        return model
    kw = {"mode": "reduce-overhead"} if mode.endswith("-ro") else {}
    if mode.startswith("symmflow"):
        kw["backend"] = "symmflow"
    return torch.compile(model, **kw)


def ids_for(batch: int, seq: int, device) -> torch.Tensor:
    g = torch.Generator().manual_seed(1234 + batch * 7 + seq)
    return torch.randint(0, hf_models.VOCAB, (batch, seq), generator=g).to(device)


def run_prefill(model, modes, batch, seq, args, device, row):
    ids = ids_for(batch, seq, device)
    with torch.no_grad():
        want = model(input_ids=ids).logits.float()
        scale = max(want.abs().max().item(), 1e-6)
        for mode in modes:
            fn = lambda mode=mode: compiled(model, mode)  # noqa: E731
            measure(mode, lambda c: lambda: c(input_ids=ids).logits, fn, want, scale,
                    args, device, row)


def run_decode(model, modes, batch, kv, args, device, row):
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_batch_size=batch, max_cache_len=kv + 1)
    prompt = ids_for(batch, kv, device)
    token = ids_for(batch, 1, device)
    position = torch.full((batch, 1), kv, device=device)

    window = []  # a sliding window's layers (Mistral) and their contents after the prompt

    def step(fn):
        # transformers' StaticCache writes at its own running length (a tensor at a fixed
        # address): set back to KV, every call writes the same token into the same slot. A
        # sliding window rolls its contents every step instead: they are put back too.
        for layer in cache.layers:
            layer.cumulative_length.fill_(kv)
        for layer, keys, values in window:
            layer.cumulative_length_int = kv
            layer.keys.copy_(keys)
            layer.values.copy_(values)
        return fn(input_ids=token, past_key_values=cache, position_ids=position).logits

    with torch.no_grad():
        model(input_ids=prompt, past_key_values=cache)
        window[:] = [(layer, layer.keys.clone(), layer.values.clone()) for layer in cache.layers
                     if getattr(layer, "is_sliding", False)]
        want = step(model).float()
        scale = max(want.abs().max().item(), 1e-6)
        for mode in modes:
            fn = lambda mode=mode: compiled(model, mode)  # noqa: E731
            measure(mode, lambda c: lambda: step(c), fn, want, scale, args, device, row)


def run_train(full, modes, batch, seq, args, device, row):
    ids = ids_for(batch, seq, device)

    def trainer(mode):
        model = hf_models.parallelize(copy.deepcopy(full), args.model_name, args.style).train()
        fn = compiled(model, mode)
        # foreach=False: the multi-tensor path refuses a list mixing DTensors and tensors.
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)

        def step():
            loss = fn(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()
        return step

    eager_step = trainer("eager")
    want = [eager_step().item(), eager_step().item()]
    del eager_step
    for mode in modes:
        # A step returns its loss: the first two, against eager's, are the check.
        measure(mode, lambda step: step, lambda mode=mode: trainer(mode), torch.tensor(want),
                max(abs(want[1]), 1e-6), args, device, row, calls=2)


def measure(mode, call_of, make, want, scale, args, device, row, calls=1):
    """Times mode's call (call_of(make())) and its error against `want`: the result of its
    `calls`-th call (reduce-overhead's first replay), or for calls=2 of a training step the first
    two losses, relative to `scale`."""
    try:
        hf_models.fresh_dtensor_caches()  # Note [DTensor's cache and the order of modes]
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        fn = call_of(make())
        got = [fn() for _ in range(2)]
        got = torch.stack([g.detach().float().cpu() for g in got]) if calls == 2 else got[1]
        row["errors"][mode] = (got.float().cpu() - want.float().cpu()).abs().max().item() / scale
        row["ms"][mode] = median_ms(fn, device, args.iters, args.warmup)
        if device.type == "cuda":
            row["peak_mb"][mode] = torch.cuda.max_memory_allocated(device) / 2**20
        if args.loop:
            row.setdefault("loop", {})[mode] = loop_ms(fn, device, args.loop)
        if mode in args.host_profile.split(","):
            row.setdefault("host_profile", {})[mode] = host_profile(fn, device)
        if mode in args.profile.split(","):
            row.setdefault("profile", {})[mode], row.setdefault("sequence", {})[mode] = \
                kernel_table(fn)
        if mode.startswith("symmflow"):
            import symmflow.torch as sft

            report = sft.last_report()
            row["partitions"][mode] = report.partition_count if report else None
            if mode in args.profile.split(","):
                row.setdefault("graphs", {})[mode] = live_graphs()
    except Exception:  # noqa: BLE001 - a failing mode is reported, the sweep goes on
        row["failed"][mode] = traceback.format_exc()[-1200:]


def loop_ms(fn, device, calls: int) -> tuple[float, float]:
    """`calls` calls back to back with no synchronisation between them, as a serving loop runs
    (the median of 3 such loops): (ms per call until the last one finished, ms per call the host
    took to issue them)."""
    runs = []
    for _ in range(3):
        sync(device)
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        issued = time.perf_counter()
        sync(device)
        end = time.perf_counter()
        runs.append(((end - start) * 1e3 / calls, (issued - start) * 1e3 / calls))
    return sorted(runs)[1]


def host_profile(fn, device, calls: int = 20, top: int = 18) -> list:
    """The host's time per call by Python function (cProfile over `calls` synchronised calls,
    largest own time first): [(us own, us cumulative, calls per call, function)]."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    sync(device)
    prof.enable()
    for _ in range(calls):
        fn()
        sync(device)
    prof.disable()
    stats = pstats.Stats(prof).stats
    rows = sorted(((tt * 1e6 / calls, ct * 1e6 / calls, nc / calls,
                    f"{os.path.basename(f)}:{line}({name})")
                   for (f, line, name), (_, nc, tt, ct, _) in stats.items()), reverse=True)
    return rows[:top]


def kernel_table(fn, top: int = 12) -> tuple[list, list]:
    """GPU time per kernel of one call, largest first, as tools/device/breakdown.py measures it
    (torch.profiler over 3 calls): [(name, us per call, launches per call)], the total first;
    and the first call's kernels in launch order, [(name, us, start us after the first)] (kept in
    --out only)."""
    from breakdown import kernel_table as profiled  # GPU only: imported when asked for

    _, table, sequence = profiled(fn, 3)
    total = ("total", sum(us for us, _, _ in table), sum(n for _, n, _ in table))
    first = sequence[0][0] if sequence else 0  # none seen: a graph replay the profiler missed
    return ([total] + [(name, us, n) for us, n, name in table[:top]],
            [(name, us, start - first) for start, name, us in sequence])


def live_graphs() -> list:
    """What each live compiled partition's GPU backend did (its CUDA graph's nodes and how many
    input bindings it captured: a count that grows every call means a capture every call)."""
    import gc

    from symmflow.torch._runner import PartitionRunner

    # type(), not isinstance(): a dead weakref.proxy among the objects raises on isinstance.
    return [r.session.device_description for r in gc.get_objects()
            if type(r) is PartitionRunner and r.cuda]


def best(row, prefix):
    times = [t for m, t in row["ms"].items() if m.startswith(prefix)]
    return min(times) if times else float("nan")


def print_row(row, modes):
    ratio = best(row, "inductor") / best(row, "symmflow")
    eager = row["ms"].get("eager", float("nan")) / best(row, "symmflow")
    print(f"{row['model']:<7} {row['point']:<16}" + "".join(
        f"{row['ms'].get(m, float('nan')):12.3f}" for m in modes)
        + f"  {ratio:6.2f}x {eager:6.2f}x  "
        + " ".join(f"{m}={e:.1e}" for m, e in row["errors"].items())
        + ("  peak MB " + "/".join(f"{row['peak_mb'].get(m, 0):.0f}" for m in modes)
           if row["peak_mb"] else "")
        + f"  parts {row['partitions']}", flush=True)
    for mode, text in row["failed"].items():
        print(f"    FAILED {mode}: {text.strip().splitlines()[-1]}", flush=True)
    for mode, (per_call, issue) in row.get("loop", {}).items():
        print(f"    {mode}: a loop of unsynchronised calls {per_call:.3f} ms a call "
              f"(the host issued each in {issue:.3f} ms)", flush=True)
    for mode, table in row.get("host_profile", {}).items():
        print(f"    {mode}: host time per call by Python function (us own, us cumulative, calls)")
        for own, cum, n, name in table:
            print(f"      {own:9.1f} {cum:9.1f} {n:6.1f}  {name}", flush=True)
    for mode, graphs in row.get("graphs", {}).items():
        for text in graphs:
            print(f"    {mode}: {text}", flush=True)
    for mode, table in row.get("profile", {}).items():
        print(f"    {mode}: GPU time per call by kernel (us, launches)")
        for name, us, count in table:
            print(f"      {us:10.1f} {count:6.1f}  {name}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="llama,qwen3")
    p.add_argument("--size", default="4096", choices=sorted(hf_models.SIZES))
    p.add_argument("--style", default="dtensor", choices=hf_models.STYLES)
    p.add_argument("--points")
    p.add_argument("--modes")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--out")
    p.add_argument("--profile", default="",
                   help="modes whose GPU time per kernel is printed (torch.profiler), e.g. symmflow")
    p.add_argument("--host-profile", default="",
                   help="modes whose host time per call by Python function is printed (cProfile)")
    p.add_argument("--loop", type=int, default=0,
                   help="also time this many calls back to back, unsynchronised (serving's loop)")
    args = p.parse_args()
    cuda = args.device == "cuda"
    if cuda:
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    import symmflow.torch as sft

    sft.init()
    points = [parse_point(t) for t in (args.points or (GPU_POINTS if cuda else CPU_POINTS)).split(",")]
    modes = (args.modes or ("eager,symmflow,symmflow-ro,inductor,inductor-ro" if cuda
                            else "eager,symmflow,inductor")).split(",")
    longest = max(n + 1 for _, _, n in points)
    where = torch.cuda.get_device_name(device) if cuda else f"{os.cpu_count()} CPUs"
    if rank == 0:
        print(f"sweep: {world} rank(s) on {where}, torch {torch.__version__}, {args.size} "
              f"{args.dtype}, DTensor style {args.style}; ms, medians of {args.iters}")
        print(f"{'model':<7} {'point':<16}" + "".join(f"{m:>12}" for m in modes)
              + "  sf/ind  sf/eager  max error vs eager", flush=True)
    out = open(args.out, "a") if args.out and rank == 0 else None
    for name in args.models.split(","):
        args.model_name = name
        full = hf_models.make_model(name, DTYPES[args.dtype], size=args.size,
                                    device=str(device), max_positions=longest)
        served = hf_models.parallelize(copy.deepcopy(full), name, args.style)
        for kind, batch, length in points:
            row = {"model": name, "point": f"{kind}:{batch}{'@' if kind == 'decode' else 'x'}{length}",
                   "world": world, "device": where, "dtype": args.dtype, "size": args.size,
                   "ms": {}, "errors": {}, "peak_mb": {}, "partitions": {}, "failed": {}}
            if kind == "prefill":
                run_prefill(served, modes, batch, length, args, device, row)
            elif kind == "decode":
                run_decode(served, modes, batch, length, args, device, row)
            else:
                run_train(full, modes, batch, length, args, device, row)
            if rank == 0:
                print_row(row, modes)
                if out:
                    out.write(json.dumps(row) + "\n")
                    out.flush()
        del full, served
    if rank == 0:
        import symmflow

        choices = symmflow.kernel_choices()
        if choices:
            print("GPU kernels chosen by measurement (rank 0):\n" + choices, flush=True)
    leave(cuda)


def leave(cuda: bool) -> None:
    """Ends the sweep's processes. On GPUs, once inductor's reduce-overhead mode has replayed NCCL
    collectives from CUDA graphs, torch 2.11's destroy_process_group does not return (seen
    2026-11-28 on 2 H200s: both ranks still in it 25 s after the table, the run killed at its
    time limit; eager and symmflow alone exit at once). The ranks meet once more, symmflow leaves
    its world, and the process exits without c10d's teardown."""
    dist.barrier()
    if not cuda:
        dist.destroy_process_group()
        return
    import symmflow

    symmflow._core._shutdown_store()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
