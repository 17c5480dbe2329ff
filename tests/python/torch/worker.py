"""One rank of the torchrun tests of the symmflow backend (tests/python/torch/test_torchrun.py).

    torchrun --nproc-per-node N tests/python/torch/worker.py CASE[,CASE...] DTYPE[,DTYPE...]

For every case and dtype: builds the model of examples/pytorch/tp_models.py, runs it eagerly (or,
for the symm_mem cases that have no eager CPU kernel in torch, computes the reference with
torch.distributed.all_reduce over gloo), runs it under torch.compile(backend="symmflow"), compares
every element within the dtype's tolerance, and prints one line per case:
`RESULT {"case", "dtype", "rank", "max_err", "tol", "ok", "partitions", "boundaries", ...}`.
Special cases: "raise" (rank 1 raises inside a compiled call; every rank must raise naming it),
"shapes" (rank 1 binds other shapes; every rank must raise naming the input), "eager"
(symmflow.torch.empty and torch.ops.symmflow ops, a symmetric and a staged tensor, against gloo),
"cudagraph" (GPU only: the compiled MLP captured by the user's torch.cuda.graph and under
mode="reduce-overhead", replayed on new inputs, against eager).
SYMMFLOW_TEST_DEVICE=cuda runs the models, inputs and ops on the rank's GPU (rank % GPUs: ranks
may share one) with the reference computed on the CPU; torch.distributed stays gloo.
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
DEVICE = os.environ.get("SYMMFLOW_TEST_DEVICE", "cpu")


def device() -> torch.device:
    if DEVICE == "cpu":
        return torch.device("cpu")
    return torch.device("cuda", dist.get_rank() % torch.cuda.device_count())
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
    model, inputs = model.to(device()), [t.to(device()) for t in inputs]
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="symmflow")
    with torch.no_grad():
        got = compiled(*inputs).cpu()
        got2 = compiled(*inputs).cpu()  # a second call reuses the plan
    err = max((got.float() - want.float()).abs().max().item(),
              (got2.float() - want.float()).abs().max().item())
    scale = max(want.float().abs().max().item(), 1.0)
    tol = TOLERANCE[dtype] * scale
    report = sft.last_report()
    text = report.text() if report else ""
    return {"explain_ok": all(w in text for w in ("pool", "symm[", "collective")),
            "case": case, "dtype": str(dtype).split(".")[-1], "rank": rank, "world": world,
            "device": str(device()),
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
    lib.impl("fail_on_rank", fail_on_rank, "CUDA")
    torch.library.register_fake("symmflow_test::fail_on_rank", lambda x, r: torch.empty_like(x),
                                lib=lib)
    compiled = torch.compile(Failing(), backend="symmflow")
    x = torch.ones(8, 16, device=device())
    start = time.monotonic()
    try:
        with torch.no_grad():
            for _ in range(3):
                compiled(x)
                if x.is_cuda:  # GPU runs are asynchronous: a program syncs now and then
                    torch.cuda.synchronize()
                    time.sleep(0.2)
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
    x = torch.ones(8 if rank != 1 else 12, 16, device=device())
    try:
        with torch.no_grad():
            torch.compile(model, backend="symmflow")(x)
        message = ""
    except Exception as e:  # noqa: BLE001
        message = f"{type(e).__name__}: {e}"
    # The user's argument is named (Note [input names] in _backend.py), with each rank's shape.
    ok = ("input 'x'" in message and "f32[8, 16]" in message and "f32[12, 16]" in message
          and "arg0_1" not in message)
    return {"case": "shapes", "rank": rank, "ok": ok, "message": message[:400]}


def run_eager(dtype: torch.dtype) -> dict:
    """torch.ops.symmflow ops on symmflow.torch.empty tensors (one written by PyTorch's kernels just
    before the op) and on a plain tensor (staged on the CPU, refused on a GPU), eagerly on DEVICE,
    against gloo's all_reduce of the same values."""
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD.group_name
    values = [torch.arange(37 * 5, dtype=torch.float32).reshape(37, 5) * (r + 1) / 64
              for r in range(world)]
    want = values[rank].clone()
    dist.all_reduce(want)
    x = sft.empty((37, 5), dtype=dtype, device=device())
    assert x.device == device() and x.dtype == dtype, (x.device, x.dtype)
    x.copy_(values[rank].to(dtype))
    got = torch.ops.symmflow.one_shot_all_reduce(x, "sum", group)
    plain = values[rank].to(dtype).to(device())  # not symmetric: staged through a fresh heap
    if plain.is_cuda:  # refused on a GPU (Note [no GPU staging] in _library.py)
        try:
            torch.ops.symmflow.one_shot_all_reduce(plain, "sum", group)
            refused = ""
        except Exception as e:  # noqa: BLE001 - the message is checked
            refused = str(e)
        assert "argument 'input' is a CUDA tensor outside symmetric memory" in refused, refused
        got_plain = got
    else:
        got_plain = torch.ops.symmflow.one_shot_all_reduce(plain, "sum", group)
    inplace = sft.empty((37, 5), dtype=dtype, device=device())
    # Written by an asynchronous kernel on PyTorch's stream (a device-to-device copy scaled on
    # the GPU), which the op must see (Note [eager GPU calls] in src/api/session.cpp).
    inplace.copy_(plain * 0.5)
    inplace.mul_(2.0)
    torch.ops.symmflow.two_shot_all_reduce_(inplace, "sum", group)
    tol = TOLERANCE[dtype] * max(want.abs().max().item(), 1.0)
    errs = [(t.cpu().float() - want).abs().max().item() for t in (got, got_plain, inplace)]
    return {"case": "eager", "dtype": str(dtype).split(".")[-1], "rank": rank,
            "device": str(device()), "max_err": max(errs), "tol": tol, "errs": errs,
            "last_row": {"want": want[-1].tolist(), "got": got[-1].cpu().float().tolist(),
                         "plain": got_plain[-1].cpu().float().tolist(),
                         "inplace": inplace[-1].cpu().float().tolist()},
            "ok": max(errs) <= tol and got.device == device()}


def run_cudagraph(dtype: torch.dtype) -> dict:
    """The compiled MLP inside PyTorch's CUDA graphs: captured by the user (torch.cuda.graph) and
    by mode="reduce-overhead", replayed on new inputs; every result against eager on the CPU."""
    rank, world = dist.get_rank(), dist.get_world_size()
    model = tp_models.make_model("mlp", dtype)
    x0 = tp_models.make_inputs("mlp", dtype, rank=rank, world=world)[0]
    xs = [x0 * (k + 1) for k in range(3)]
    with torch.no_grad():
        wants = [model(x) for x in xs]
        model = model.to(device())
        errs = []
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="symmflow")
        static = xs[0].to(device())
        compiled(static)  # warm-up: compiles, allocates, rendezvouses
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = compiled(static)
        for x, want in zip(xs, wants):
            static.copy_(x)
            graph.replay()
            errs.append((out.cpu().float() - want.float()).abs().max().item())
        torch._dynamo.reset()
        overhead = torch.compile(model, backend="symmflow", mode="reduce-overhead")
        for _ in range(2):
            for x, want in zip(xs, wants):
                got = overhead(x.to(device())).cpu().float()
                errs.append((got - want.float()).abs().max().item())
    tol = TOLERANCE[dtype] * max(max(w.float().abs().max().item() for w in wants), 1.0)
    report = sft.last_report()
    return {"case": "cudagraph", "dtype": str(dtype).split(".")[-1], "rank": rank,
            "device": str(device()), "max_err": max(errs), "tol": tol, "ok": max(errs) <= tol,
            "partitions": report.partition_count, "copies_added": report.copies_added()}


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


def run_cases(run_one, device: str = "cpu", timeout_s: str = "30", seed: int | None = None) -> int:
    """The main loop of the model workers (hf_worker, train_worker, a2a_worker): argv's cases x
    dtypes (a case written `case@dtype` runs in that dtype only: expected_runs), each
    `run_one(case, dtype_name)`'s result (or its traceback as a failed case) emitted; on GPUs each
    rank drives its own GPU and eager collectives on cuda tensors go through NCCL."""
    cases, dtypes = sys.argv[1].split(","), sys.argv[2].split(",")
    if device == "cuda":  # by the global rank: launchers on one machine as simulated hosts too
        torch.cuda.set_device(int(os.environ.get("RANK", "0")) % torch.cuda.device_count())
    dist.init_process_group("cpu:gloo,cuda:nccl" if device == "cuda" else "gloo")
    sft.init(timeout_s=float(os.environ.get("SYMMFLOW_TEST_TIMEOUT_S", timeout_s)))
    failed = False
    for spec in cases:
        case, _, own = spec.partition("@")
        for dtype_name in [own] if own else dtypes:
            if seed is not None:
                torch.manual_seed(seed)
            try:
                result = run_one(case, dtype_name)
            except Exception:  # noqa: BLE001 - reported as a failed case
                result = {"case": case, "dtype": dtype_name, "rank": dist.get_rank(),
                          "ok": False, "error": traceback.format_exc()[-3000:]}
            failed |= not result["ok"]
            emit(result)
    dist.destroy_process_group()
    return 1 if failed else 0


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
                elif case == "eager":
                    result = run_eager(DTYPES[dtype_name])
                elif case == "cudagraph":
                    result = run_cudagraph(DTYPES[dtype_name])
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
