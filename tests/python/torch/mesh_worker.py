"""One rank of the 2-D mesh training tests (tests/python/torch/test_mesh.py, issue 38).

    torchrun --nnodes H --nproc-per-node T mesh_worker.py MODEL:MODE[,...] DTYPE[,...]

A DeviceMesh of (dp = world / T, tp = T): tensor parallelism inside each launcher's processes
(one "host": SYMMFLOW_HOST_ID per launcher), data parallelism across them
(examples/pytorch/data_parallel.py, MODE "replicate" or "fully_shard"). For every case: two copies
of the same 2-D model, one trained eagerly and one compiled with torch.compile(backend="symmflow"),
STEPS steps of AdamW, each data-parallel rank on its slice of one global batch. Compared: the loss
at every step and every parameter's step-1 gradient (this rank's tensor-parallel shard, every
element). Also checked: the eager 2-D model's step-1 gradients equal those of the model made
tensor-parallel only and run on the whole batch (the data-parallel mean is right). Recorded from
the reports: partitions, boundaries, copies, and every collective's group (tp or dp), op and
algorithm (explain's text says when a group spans hosts). One `RESULT {json}` line per case.
SYMMFLOW_TEST_DEVICE=cuda trains on the GPU of the rank (its global rank modulo the GPUs: the
launchers of one machine as simulated hosts, `bash tools/device/sf.sh mesh`).
"""
from __future__ import annotations

import math
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "pytorch"))

import data_parallel as dpm  # noqa: E402
import hf_models  # noqa: E402
from train_worker import DTYPES, GRAD_TOL, TOLERANCE, loss_diff  # noqa: E402
from worker import run_cases  # noqa: E402

import symmflow.torch as sft  # noqa: E402
from symmflow.torch import _runtime  # noqa: E402  (the symmflow name of a c10d group)

STEPS = int(os.environ.get("SYMMFLOW_TRAIN_STEPS", "5"))
DEVICE = os.environ.get("SYMMFLOW_TEST_DEVICE", "cpu")
BATCH = 4  # the global batch; each data-parallel rank trains on its slice


def _shard(g, dp_mesh) -> torch.Tensor:
    """This rank's tensor-parallel shard of a gradient: a fully_shard gradient (a DTensor on the
    data-parallel mesh) gathered over it, a tensor-parallel DTensor's local part, or the tensor."""
    if isinstance(g, DTensor):
        g = g.full_tensor() if g.device_mesh == dp_mesh else g.to_local()
    return g.detach().float().clone()


def _plain(name: str) -> str:
    """A parameter's name without the parametrization's wrapping (and torch.compile's)."""
    return name.replace("_orig_mod.", "").replace(".parametrizations", "").replace(".original", "")


def _train(model, ids, steps, dp_mesh):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    losses, grads = [], {}
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = model(ids, labels=ids).loss
        loss.backward()
        if step == 0:
            grads = {_plain(n): _shard(p.grad, dp_mesh) for n, p in model.named_parameters()
                     if p.grad is not None}
        optimizer.step()
        losses.append(loss.item())
    return losses, grads


def _grad_err(want: dict, got: dict):
    if set(want) != set(got):
        return float("inf"), f"parameters differ: {sorted(set(want) ^ set(got))[:4]}"
    err, worst = 0.0, None
    for n, g in want.items():
        e = (g - got[n]).abs().max().item() / max(g.abs().max().item(), 1e-3)
        if not math.isfinite(e):  # a NaN compares false with everything
            return math.inf, f"{n}: not finite"
        if e > err:
            err, worst = e, n
    return err, worst


def _collectives(reports, names: dict) -> list:
    """Every collective of the forward's and the backward's partitions: pass, op, mesh dimension
    (names maps symmflow group names to "tp"/"dp") and explain's algorithm and reason."""
    out = []
    for which, r in zip(("forward", "backward"), reports[-2:]):
        for p in r.partitions:
            for c in p.explain.get("collectives", []):
                out.append({"pass": which, "op": str(c.get("op")),
                            "dim": names.get(str(c.get("group")), str(c.get("group"))),
                            "algorithm": str(c.get("cpu")), "cuda": str(c.get("cuda")),
                            "why": str(c.get("why"))})
    return out


def run_case(name: str, mode: str, dtype: torch.dtype) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    tp = int(os.environ["LOCAL_WORLD_SIZE"])
    mesh = init_device_mesh(DEVICE, (world // tp, tp), mesh_dim_names=("dp", "tp"))
    dp_mesh, tp_mesh = mesh["dp"], mesh["tp"]
    device = torch.device("cuda", torch.cuda.current_device()) if DEVICE == "cuda" else "cpu"
    full = hf_models.make_model(name, dtype).to(device).train()
    batch = hf_models.make_input_ids(batch=BATCH).to(device)
    ids = dpm.batch_slice(batch, dp_mesh)

    def two_d():
        model = hf_models.sharded_copy(full, name, "dtensor", mesh=tp_mesh)
        return dpm.data_parallel(model, dp_mesh, mode)

    want, want_grads = _train(two_d(), ids, STEPS, dp_mesh)
    # The data-parallel mean against tensor parallelism alone on the whole batch (one step).
    _, whole = _train(hf_models.sharded_copy(full, name, "dtensor", mesh=tp_mesh), batch, 1,
                      dp_mesh)
    dp_err, dp_worst = _grad_err(whole, want_grads)
    torch._dynamo.reset()
    before = len(sft.reports())
    got, got_grads = _train(torch.compile(two_d(), backend="symmflow"), ids, STEPS, dp_mesh)
    reports = sft.reports()[before:]
    names = {_runtime.resolve_group(m.get_group().group_name).name: d
             for d, m in (("dp", dp_mesh), ("tp", tp_mesh))}
    loss_err = loss_diff(want, got)
    grad_err, worst = _grad_err(want_grads, got_grads)
    tol = TOLERANCE[dtype]
    ok = (loss_err <= tol * max(max(abs(x) for x in want), 1.0) and grad_err <= GRAD_TOL[dtype]
          and dp_err <= GRAD_TOL[dtype])
    return {"case": f"{name}:{mode}", "dtype": str(dtype).split(".")[-1], "rank": rank,
            "world": world, "dp": world // tp, "tp": tp, "ok": ok, "losses_eager": want,
            "losses_symmflow": got, "loss_err": loss_err, "grad_err": grad_err,
            "worst_grad": worst, "dp_mean_err": dp_err, "dp_mean_worst": dp_worst,
            "graphs": len(reports), "partitions": [r.partition_count for r in reports],
            "boundaries": [list(r.boundaries) for r in reports],
            "copies_added": [r.copies_added() for r in reports],
            "collectives": _collectives(reports, names),
            "copy_reasons": sorted({c.get("reason", "") for r in reports for p in r.partitions
                                    for c in p.explain.get("copies", [])})}


def main() -> int:
    def one(case, dtype_name):
        name, mode = case.split(":")
        return run_case(name, mode, DTYPES[dtype_name])
    return run_cases(one, DEVICE, "30", seed=0)


if __name__ == "__main__":
    sys.exit(main())
