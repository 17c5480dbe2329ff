"""Where the host time of a compiled call goes (issue 27, items 5 and 6): the decoder layer of
tools/device/torch_backend.py at world 1 (bf16, 16 tokens, hidden 4096), through the symmflow
backend in its default mode and under mode="reduce-overhead", beside inductor's reduce-overhead.

    torchrun --nproc-per-node 1 tools/device/host_path.py [--iters 200]

Each piece is timed on the host alone: the clock stops when the piece returns, before the
synchronisation that follows it, so the figure is what the piece costs the CPU (launches
included, GPU time not). Then the same calls synchronised (what torch_backend.py's tables show),
and a cProfile of the reduce-overhead calls (top functions by own time). Rank 0 prints the table.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import statistics
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "pytorch"))
import tp_models  # noqa: E402

import symmflow.torch as sft  # noqa: E402
from symmflow.torch import _backend, _cudagraphs  # noqa: E402
from graph_timing import call_median_us, join_gpu_world  # noqa: E402


def host_us(fn, iters, sync=False):
    return call_median_us(fn, iters, warmup=10, synchronised=sync)


def gpu_us(fn, iters):
    """GPU time between events recorded on the current stream around `fn`, median."""
    for _ in range(10):
        fn()
    times = []
    for _ in range(iters):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        begin.record()
        fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1e3)
    return statistics.median(times)


def newest(kind):
    found = [o for o in gc.get_objects() if type(o) is kind]
    return found[-1] if found else None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=200)
    args = p.parse_args()
    _, _, device = join_gpu_world()  # run with one process: the device is GPU 0
    sft.init()
    kw = dict(hidden=4096, heads=32, kv_heads=8, ffn=11008)
    model = tp_models.make_model("decoder", torch.bfloat16, **kw).to(device)
    inputs = [t.to(device) for t in tp_models.make_inputs("decoder", torch.bfloat16, tokens=16,
                                                          hidden=4096, heads=32)]
    rows = []
    with torch.no_grad():
        rows.append(("eager op (x * 2)", host_us(lambda: inputs[0] * 2, args.iters)))
        torch._dynamo.reset()
        default = torch.compile(model, backend="symmflow")
        default(*inputs)
        runner = _backend.last_runner()
        rows.append(("symmflow default: call", host_us(lambda: default(*inputs), args.iters)))
        rows.append(("  synchronised", host_us(lambda: default(*inputs), args.iters, True)))
        rows.append(("  GPU time (events)", gpu_us(lambda: default(*inputs), args.iters)))
        session = runner.session
        outs = runner._empty_outputs()
        rows.append(("  torch.empty of the outputs", host_us(runner._empty_outputs, args.iters)))
        rows.append(("  current raw stream", host_us(runner._stream, args.iters)))
        probe = {}  # the partition's inputs as the direct call passes them
        runner_call = type(runner).__call__
        type(runner).__call__ = lambda self, *a: (probe.setdefault("args", a),
                                                  runner_call(self, *a))[1]
        default(*inputs)
        type(runner).__call__ = runner_call
        part_args = probe["args"]
        rows.append(("  runner call", host_us(lambda: runner(*part_args), args.iters)))
        rows.append(("  runner._pointers", host_us(lambda: runner._pointers(part_args),
                                                   args.iters)))
        ptrs, _dense = runner._pointers(part_args)
        out_ptrs = [o.data_ptr() for o in outs]
        stream = runner._stream()
        rows.append(("  Session.run_pointers", host_us(
            lambda: session.run_pointers(ptrs, out_ptrs, cuda_device=device.index, stream=stream),
            args.iters)))
        rows.append(("    synchronised", host_us(
            lambda: session.run_pointers(ptrs, out_ptrs, cuda_device=device.index, stream=stream),
            args.iters, True)))
        rows.append(("    GPU time (events)", gpu_us(
            lambda: session.run_pointers(ptrs, out_ptrs, cuda_device=device.index, stream=stream),
            args.iters)))
        torch._dynamo.reset()  # Note [inference without AOT's wrappers]: the call before it
        kept = torch.compile(model, backend="symmflow", options={"direct_call": False})
        kept(*inputs)
        rows.append(("symmflow default, AOT's wrappers kept", host_us(lambda: kept(*inputs),
                                                                     args.iters)))
        torch._dynamo.reset()
        ro = torch.compile(model, backend="symmflow", mode="reduce-overhead")
        ro(*inputs)
        ro(*inputs)
        graphed = newest(_cudagraphs.GraphedCallable)
        rows.append(("symmflow reduce-overhead: call", host_us(lambda: ro(*inputs), args.iters)))
        rows.append(("  synchronised", host_us(lambda: ro(*inputs), args.iters, True)))
        rows.append(("  GPU time (events)", gpu_us(lambda: ro(*inputs), args.iters)))
        if graphed is not None:
            gargs = graphed.static_args
            rows.append(("  GraphedCallable call", host_us(lambda: graphed(*gargs), args.iters)))
            rows.append(("  CUDAGraph.replay", host_us(graphed.graph.replay, args.iters)))
            rows.append(("    synchronised", host_us(graphed.graph.replay, args.iters, True)))
            rows.append(("    GPU time (events)", gpu_us(graphed.graph.replay, args.iters)))
            rows.append(("  outputs (clone)", host_us(graphed._outputs, args.iters)))
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.iters):
            ro(*inputs)
        prof.disable()
        torch.cuda.synchronize()
        torch._dynamo.reset()
        ind = torch.compile(model, mode="reduce-overhead")
        for _ in range(3):
            ind(*inputs)
        rows.append(("inductor reduce-overhead: call", host_us(lambda: ind(*inputs), args.iters)))
        rows.append(("  synchronised", host_us(lambda: ind(*inputs), args.iters, True)))
        rows.append(("  GPU time (events)", gpu_us(lambda: ind(*inputs), args.iters)))
    if dist.get_rank() == 0:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
        print(text.getvalue()[-6000:])
        print(f"\nhost_path: decoder layer, world 1, {torch.cuda.get_device_name(device)}, "
              f"torch {torch.__version__}; host us per call (median of {args.iters})")
        for name, us in rows:
            print(f"  {name:<36} {us:8.1f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
