"""The symmflow torch.compile backend on GPUs, checked and timed (issue 17; `sf.sh backend`).

    torchrun --nproc-per-node N tools/device/torch_backend.py --json out.json

For the 8-layer MLP (hidden 4096, 16 tokens) and the Llama-style decoder block (16 tokens, hidden
4096, 32 heads, 8 KV heads, FFN 11008) in bf16 of examples/pytorch/tp_models.py: eager, the
symmflow backend (with and without its own CUDA graphs, and inside PyTorch's: mode="reduce-overhead"),
torch.compile's default backend (inductor) and its "reduce-overhead" mode (PyTorch's CUDA graphs),
in the same run on the same inputs. Every
compiled result is compared with eager on every element (bf16 tolerance); times are medians of
--iters calls after warm-up, synchronised per call. Also measures the Python path's per-call
overhead: a one-op partition called through the backend versus the same Session called directly.
Rank 0 prints a table last and writes the JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "pytorch"))
import tp_models  # noqa: E402

import symmflow.torch as sft  # noqa: E402
from symmflow.torch import _backend  # noqa: E402
from symmflow.torch._runner import PartitionRunner  # noqa: E402
from graph_timing import call_median_us  # noqa: E402


def median_us(fn, iters):
    return call_median_us(fn, iters)


def check(name, got, want, rows):
    err = (got.float() - want.float()).abs().max().item()
    tol = 3e-2 * max(want.float().abs().max().item(), 1.0)
    rows.append({"what": name, "max_err": err, "tol": tol, "ok": err <= tol})
    return err <= tol


def run_model(case, args, device, results):
    kw = dict(hidden=4096, heads=32, kv_heads=8, ffn=11008) if case == "decoder" else dict(hidden=4096)
    rank, world = dist.get_rank(), dist.get_world_size()
    model = tp_models.make_model(case, torch.bfloat16, **kw)
    cpu_inputs = tp_models.make_inputs(case, torch.bfloat16, tokens=16, hidden=4096,
                                       heads=kw.get("heads", 8), rank=rank, world=world)
    timings, rows = {}, []
    model = model.to(device)
    inputs = [t.to(device) for t in cpu_inputs]
    with torch.no_grad():
        want = model(*inputs)
        timings["eager"] = median_us(lambda: model(*inputs), args.iters)
        # NO_NORM=1 adds the same without the norm fusions (Note [skipping fusions]); the DLPack
        # row is the default mode with every tensor converted as before Note [pointer call].
        no_norm = "raise_rms_norm,fuse_allreduce_rmsnorm"
        variants = {"symmflow": (None, True, "", True),
                    "symmflow, DLPack call (before)": (None, True, "", False),
                    "symmflow (no cuda graph)": (None, False, "", True),
                    "symmflow reduce-overhead": ("reduce-overhead", True, "", True)}
        if os.environ.get("NO_NORM") == "1":
            variants["symmflow, no norm fusion"] = (None, True, no_norm, True)
            variants["symmflow r-o, no norm fusion"] = ("reduce-overhead", True, no_norm, True)
        for name, (mode, graphs, skip, pointers) in variants.items():
            os.environ["SYMMFLOW_SKIP_PASSES"] = skip
            PartitionRunner.pointer_path = pointers
            try:
                torch._dynamo.reset()
                # torch.compile takes a mode or options, not both
                compiled = torch.compile(model, backend="symmflow", mode=mode,
                                         options=None if mode else {"cuda_graph": graphs})
                check(name, compiled(*inputs).cpu(), want.cpu(), rows)
                timings[name] = median_us(lambda: compiled(*inputs), args.iters)
                report = sft.last_report()
                if skip or not pointers:
                    continue
                results.setdefault("reports", {})[case] = {
                    "partitions": report.partition_count, "boundaries": report.boundaries,
                    "copies_added": report.copies_added(),
                    "all_reduce_inputs_in_place": report.all_reduce_inputs_in_place(),
                    "collectives": sorted({str(c.get("op")) for p in report.partitions
                                           for c in p.explain.get("collectives", [])})}
            except Exception:  # noqa: BLE001 - reported in the table
                rows.append({"what": name, "ok": False, "error": traceback.format_exc()[-1500:]})
        PartitionRunner.pointer_path = True
        os.environ["SYMMFLOW_SKIP_PASSES"] = ""
        if not args.no_inductor:
            for mode in ("default", "reduce-overhead"):
                name = f"inductor {mode}"
                try:
                    torch._dynamo.reset()
                    compiled = torch.compile(model, mode=None if mode == "default" else mode)
                    check(name, compiled(*inputs), want, rows)
                    timings[name] = median_us(lambda: compiled(*inputs), args.iters)
                except Exception:  # noqa: BLE001
                    rows.append({"what": name, "ok": False, "error": traceback.format_exc()[-1500:]})
    results[case] = {"timings_us": timings, "checks": rows}


def overhead(args, device, results):
    """Per-call cost of the Python path: the backend's call of a one-op partition versus the
    same symmflow Session.run called directly, and versus the op in eager."""
    x = torch.randn(16, 64, device=device)
    fn = lambda t: t * 2.0  # noqa: E731
    with torch.no_grad():
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="symmflow")
        compiled(x)
        session = _backend.last_session()
        t_backend = median_us(lambda: compiled(x), args.iters * 4)
        t_session = median_us(lambda: session.run([x]), args.iters * 4)
        out = torch.empty_like(x)
        stream = torch.cuda.current_stream().cuda_stream
        t_stream = median_us(lambda: session.run_into([x], [out], stream=stream), args.iters * 4)
        t_eager = median_us(lambda: fn(x), args.iters * 4)
    results["overhead_us"] = {"backend call": t_backend, "Session.run (waits)": t_session,
                              "Session.run_into on torch's stream": t_stream, "eager op": t_eager}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json", default="torch_backend.json")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--cases", default="mlp,decoder")
    p.add_argument("--no-inductor", action="store_true")
    args = p.parse_args()
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    sft.init()
    results = {"world": dist.get_world_size(), "device": torch.cuda.get_device_name(device),
               "torch": torch.__version__}
    for case in args.cases.split(","):
        run_model(case, args, device, results)
    try:
        overhead(args, device, results)
    except Exception:  # noqa: BLE001
        results["overhead_error"] = traceback.format_exc()[-1500:]
    if rank == 0:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
        print(f"\ntorch_backend: world {results['world']} on {results['device']}, torch "
              f"{results['torch']}")
        for case in args.cases.split(","):
            r = results[case]
            bad = [c for c in r["checks"] if not c["ok"]]
            print(f"{case}: checks {len(r['checks']) - len(bad)}/{len(r['checks'])} ok; report "
                  f"{results.get('reports', {}).get(case)}")
            for c in bad:
                print(f"  FAILED {c['what']}: {c.get('error', c)}")
            eager = r["timings_us"].get("eager", 1.0)
            for name, us in r["timings_us"].items():
                print(f"  {name:28s} {us:9.1f} us   eager/this {eager / us:5.2f}x")
        print(f"overhead: {results.get('overhead_us', results.get('overhead_error'))}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
