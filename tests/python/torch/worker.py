"""One rank of the torchrun tests of the symmflow backend (tests/python/torch/test_torchrun.py).

    torchrun --nproc-per-node N tests/python/torch/worker.py CASE[,CASE...] DTYPE[,DTYPE...]

For every case and dtype: builds the model of examples/pytorch/tp_models.py, runs it eagerly (or,
for the symm_mem cases that have no eager CPU kernel in torch, computes the reference with
torch.distributed.all_reduce over gloo), runs it under torch.compile(backend="symmflow"), compares
every element within the dtype's tolerance, and prints one line per case:
`RESULT {"case", "dtype", "rank", "max_err", "tol", "ok", "partitions", "boundaries", ...}`.
Special cases: "raise" (rank 1 raises inside a compiled call; every rank must raise naming it),
"shapes" (rank 1 binds other shapes; every rank must raise naming the input).
Exits non-zero on any mismatch.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "pytorch"))

import tp_models  # noqa: E402

import symmflow.torch as sft  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 3e-2}


def reference(case: str, inputs, model):
    """What the model computes, without symmflow."""
    if case == "input_allreduce":
        x = inputs[0].clone()
        dist.all_reduce(x)
        return x * 0.5
    if case == "inplace_allreduce":
        y = inputs[0] * 2.0
        dist.all_reduce(y)
        return y + 1.0
    if case == "ring":
        x = inputs[0]
        rank, world = dist.get_rank(), dist.get_world_size()

        def shift(t):  # value of rank r goes to rank r + 1
            got = [torch.empty_like(t) for _ in range(world)]
            dist.all_gather(got, t.contiguous())
            return got[(rank - 1) % world]

        a = shift(x) + (x * 2.0 + 1.0)
        return shift(a) + a * 1.000244140625
    with torch.no_grad():
        return model(*inputs)


def run_case(case: str, dtype: torch.dtype) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    model = tp_models.make_model(case, dtype)
    inputs = tp_models.make_inputs(case, dtype, rank=rank, world=world)
    want = reference(case, inputs, model)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="symmflow")
    with torch.no_grad():
        got = compiled(*inputs)
        got2 = compiled(*inputs)  # a second call reuses the plan
    err = max((got.float() - want.float()).abs().max().item(),
              (got2.float() - want.float()).abs().max().item())
    scale = max(want.float().abs().max().item(), 1.0)
    tol = TOLERANCE[dtype] * scale
    report = sft.last_report()
    text = report.text() if report else ""
    return {"explain_ok": all(w in text for w in ("pool", "symm[", "collective")),
            "case": case, "dtype": str(dtype).split(".")[-1], "rank": rank, "world": world,
            "max_err": err, "tol": tol, "ok": err <= tol,
            "partitions": report.partition_count if report else None,
            "boundaries": [b for b in report.boundaries] if report else None,
            "partition_kinds": report.partition_kinds() if report else None,
            "copies_added": report.copies_added() if report else None,
            "symm_inputs_produced": report.all_reduce_inputs_in_place() if report else None}


def run_raise() -> dict:
    """Rank 1 raises inside a compiled call; the others must raise naming rank 1, in time."""
    rank = dist.get_rank()

    class Failing(torch.nn.Module):
        def forward(self, x):
            y = torch.ops.symm_mem.one_shot_all_reduce(x * 2.0, "sum", dist.group.WORLD.group_name)
            return torch.ops.symmflow_test.fail_on_rank(y, 1) + 1.0

    lib = torch.library.Library("symmflow_test", "DEF")
    lib.define("fail_on_rank(Tensor x, int rank) -> Tensor")

    def fail_on_rank(x, r):
        if dist.get_rank() == r:
            raise RuntimeError(f"deliberate failure on rank {r}")
        return x.clone()

    lib.impl("fail_on_rank", fail_on_rank, "CPU")
    torch.library.register_fake("symmflow_test::fail_on_rank", lambda x, r: torch.empty_like(x),
                                lib=lib)
    compiled = torch.compile(Failing(), backend="symmflow")
    x = torch.ones(8, 16)
    start = time.monotonic()
    try:
        with torch.no_grad():
            for _ in range(3):
                compiled(x)
        message = ""
    except Exception as e:  # noqa: BLE001 - the message is the result
        message = f"{type(e).__name__}: {e}"
    took = time.monotonic() - start
    ok = bool(message) and ("rank 1" in message)
    return {"case": "raise", "rank": rank, "ok": ok, "message": message[:400], "seconds": took}


def run_shapes() -> dict:
    """Rank 1 binds other shapes than its peers: every rank must raise naming the input."""
    rank = dist.get_rank()
    model = tp_models.make_model("input_allreduce", torch.float32)
    x = torch.ones(8 if rank != 1 else 12, 16)
    try:
        with torch.no_grad():
            torch.compile(model, backend="symmflow")(x)
        message = ""
    except Exception as e:  # noqa: BLE001
        message = f"{type(e).__name__}: {e}"
    ok = bool(message) and ("input" in message) and ("x" in message or "arg" in message)
    return {"case": "shapes", "rank": rank, "ok": ok, "message": message[:400]}


def emit(result: dict) -> None:
    """Prints the result and appends it to $SYMMFLOW_TEST_RESULTS/rank<r>.jsonl (torchrun may
    interleave the ranks' stdout)."""
    line = json.dumps(result)
    sys.stdout.write(f"RESULT {line}\n")
    sys.stdout.flush()
    folder = os.environ.get("SYMMFLOW_TEST_RESULTS")
    if folder:
        with open(os.path.join(folder, f"rank{result['rank']}.jsonl"), "a") as f:
            f.write(line + "\n")


def main() -> int:
    cases, dtypes = sys.argv[1].split(","), sys.argv[2].split(",")
    dist.init_process_group("gloo")
    sft.init(timeout_s=float(os.environ.get("SYMMFLOW_TEST_TIMEOUT_S", "20")))
    failed = False
    for case in cases:
        for dtype_name in (dtypes if case not in ("raise", "shapes") else ["f32"]):
            try:
                if case == "raise":
                    result = run_raise()
                elif case == "shapes":
                    result = run_shapes()
                else:
                    result = run_case(case, DTYPES[dtype_name])
            except Exception:  # noqa: BLE001 - reported as a failed case
                result = {"case": case, "dtype": dtype_name, "rank": dist.get_rank(), "ok": False,
                          "error": traceback.format_exc()[-3000:]}
            failed |= not result["ok"]
            emit(result)
            if case in ("raise", "shapes"):
                return 0 if result["ok"] else 1  # the world is poisoned after these
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
