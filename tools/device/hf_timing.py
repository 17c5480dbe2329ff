"""transformers' decoder stacks at the issue-27 shapes, timed through the symmflow backend beside
eager and inductor (issue 27: "the real-models issue's Llama and Qwen decoder stacks timed at TP2").

    torchrun --nproc-per-node N tools/device/hf_timing.py [--models llama,qwen3] [--iters 30]

Each model of examples/pytorch/hf_models.py at size "4096" (hidden 4096, 32/8 heads of 128, FFN
11008, two decoder layers, a vocabulary of 128 so the stack is what is timed) in bf16, built on the
GPU with the same seed on every rank and made tensor-parallel with DTensor's parallelize_module
(style "dtensor", as torchtitan does), one process per GPU. Input: 16 token ids (batch 1), no
mask. Variants: eager; symmflow (default and mode="reduce-overhead"); inductor (default and
reduce-overhead); beside each synchronised time, the host time of a call (until it returns,
the GPU synchronised after the clock stops). Every compiled logit is compared with eager's (bf16 tolerance relative to the
largest logit); times are medians of --iters synchronised calls after warm-up. Rank 0 prints a
table last, with symmflow's partitions and its fused rotary steps per model.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "pytorch"))
import hf_models  # noqa: E402

import symmflow.torch as sft  # noqa: E402
from graph_timing import call_median_us, join_gpu_world  # noqa: E402


def median_us(fn, iters, host_times, label):
    host_times[label] = call_median_us(fn, iters, synchronised=False)
    return call_median_us(fn, iters)


def run_model(name, args, device):
    full = hf_models.make_model(name, torch.bfloat16, size="4096", device=str(device))
    model = hf_models.parallelize(full, name, "dtensor")
    ids = hf_models.make_input_ids(batch=1, seq=16).to(device)
    row = {"model": name, "times": {}, "host": {}, "errors": {}, "notes": []}
    with torch.no_grad():
        want = model(input_ids=ids).logits.float()
        scale = max(want.abs().max().item(), 1.0)
        row["times"]["eager"] = median_us(lambda: model(input_ids=ids), args.iters,
                                            row["host"], "eager")
        variants = [("symmflow", dict(backend="symmflow")),
                    ("symmflow r-o", dict(backend="symmflow", mode="reduce-overhead")),
                    ("inductor", dict()),
                    ("inductor r-o", dict(mode="reduce-overhead"))]
        for label, kw in variants:
            try:
                torch._dynamo.reset()
                compiled = torch.compile(model, **kw)
                got = compiled(input_ids=ids).logits.float()
                got = compiled(input_ids=ids).logits.float()  # r-o: the captured replay
                row["errors"][label] = (got - want).abs().max().item() / scale
                row["times"][label] = median_us(lambda: compiled(input_ids=ids), args.iters,
                                                row["host"], label)
                if label == "symmflow":
                    report = sft.last_report()
                    row["partitions"] = report.partition_count
                    row["rotary_steps"] = sum(s["name"] == "fused::rotary_embedding"
                                              for p in report.partitions
                                              for s in p.explain.get("steps", []))
            except Exception:  # noqa: BLE001 - reported in the table
                row["notes"].append(f"{label}: {traceback.format_exc()[-800:]}")
    del model, full
    torch.cuda.empty_cache()
    return row


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="llama,qwen3")
    p.add_argument("--iters", type=int, default=30)
    args = p.parse_args()
    rank, world, device = join_gpu_world()
    sft.init()
    rows = [run_model(name, args, device) for name in args.models.split(",")]
    if rank == 0:
        print(f"\nhf_timing: world {world} on {torch.cuda.get_device_name(device)}, torch "
              f"{torch.__version__}; transformers decoder stacks (2 layers, hidden 4096, bf16, "
              f"16 tokens), median us of {args.iters} synchronised calls")
        labels = ["eager", "symmflow", "symmflow r-o", "inductor", "inductor r-o"]
        print("  model   " + "".join(f"{l:>14}" for l in labels) + "   r-o vs inductor r-o"
              "   max err / max|logit|   partitions, rotary steps")
        for r in rows:
            t = r["times"]
            ratio = (t["inductor r-o"] / t["symmflow r-o"]
                     if "inductor r-o" in t and "symmflow r-o" in t else float("nan"))
            errs = " ".join(f"{k}={v:.2g}" for k, v in r["errors"].items())
            print(f"  {r['model']:<8}" + "".join(f"{t.get(l, float('nan')):14.1f}" for l in labels)
                  + f"   {ratio:.2f}x   {errs}   {r.get('partitions')}, {r.get('rotary_steps')}")
            print("    host" + "".join(f"{r['host'].get(l, float('nan')):14.1f}" for l in labels))
            for note in r["notes"]:
                print(f"  FAILED {note}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
