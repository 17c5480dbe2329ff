"""One rank of the all-to-all tests (tests/python/torch/test_all_to_all.py).

    torchrun --nproc-per-node N a2a_worker.py CASE[,CASE...] DTYPE[,DTYPE...]

Every case moves a [rows, cols] matrix, sharded by rows (Shard(0): rank r holds rows block r,
computed from its block of a seeded full matrix), to a sharding by columns (Shard(1)), then
computes on the result; the reference is the same computation on the unsharded matrix's column
block r, so it needs no communication. Each is compiled with backend="symmflow", run twice, and
compared element by element; the report's facts are recorded (partitions, boundaries, copies,
every collective's input produced in symmetric memory, the symm_mem ops of the partitions' IR).
Cases:
  funcol    funcol.all_to_all_single with no split sizes (equal splits) on the rows of the
            column blocks, as DTensor's shard_dim_alltoall does on GPUs: symm_mem::all_to_all;
  splits    the same with the equal split sizes written out;
  dtensor   DTensor.redistribute(mesh, [Shard(1)]) of a Shard(0) DTensor, then compute (torch
            2.13 moves a CPU mesh's Shard -> Shard by all-gather and chunk);
  uneven    all_to_all_single with unequal splits: left to PyTorch (gloo), with the reason.
One `RESULT {json}` line per case and dtype (also appended to $SYMMFLOW_TEST_RESULTS/rank<r>.jsonl).
SYMMFLOW_TEST_DEVICE=cuda runs the compiled function on the rank's GPU (rank % GPUs) with the
reference on the CPU (funcol and splits only: a CUDA DTensor mesh needs NCCL).
"""
from __future__ import annotations

import os
import re
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from worker import run_cases  # noqa: E402  (the case loop and its RESULT lines)

import symmflow.torch as sft  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}
DEVICE = os.environ.get("SYMMFLOW_TEST_DEVICE", "cpu")
ROWS_PER_RANK, COLS_PER_RANK = 3, 5  # awkward: odd blocks, rows of 5 * world elements


def device() -> torch.device:
    if DEVICE == "cpu":
        return torch.device("cpu")
    return torch.device("cuda", dist.get_rank() % torch.cuda.device_count())


def full_matrix(world: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(1234)
    return torch.randn(ROWS_PER_RANK * world, COLS_PER_RANK * world, generator=g).to(dtype)


def compute(t: torch.Tensor) -> torch.Tensor:
    """The computation after the redistribution (the same sharded and unsharded)."""
    return torch.tanh(t) * 2.0 + t


def columns_to_rows(local: torch.Tensor, world: int) -> torch.Tensor:
    """[n, m] -> [world * n, m / world]: column block q of `local` becomes rows block q."""
    n, m = local.shape
    return local.reshape(n, world, m // world).permute(1, 0, 2).reshape(world * n, m // world)


def make_fn(case: str, world: int):
    group = dist.group.WORLD
    n = ROWS_PER_RANK
    if case in ("funcol", "splits"):
        splits = None if case == "funcol" else [n] * world

        def fn(local):
            send = columns_to_rows(local * 0.5 + 1.0, world)  # produced by the compiler
            recv = funcol.all_to_all_single(send, splits, splits, group)
            return compute(recv)
        return fn
    if case == "uneven":
        rank = dist.get_rank()
        # Rank r sends row block q to rank q, but rank 0's first block carries one row more and
        # its last one row less (sizes agreed by every rank).
        in_splits = [n] * world
        out_splits = [n] * world
        if rank == 0:
            in_splits[0], in_splits[-1] = n + 1, n - 1
        if rank == world - 1:
            out_splits[0] -= 1
        if rank == 0:
            out_splits[0] += 1

        def fn(local):
            send = columns_to_rows(local * 0.5 + 1.0, world)
            recv = funcol.all_to_all_single(send, out_splits, in_splits, group)
            return compute(recv)
        return fn
    if case == "dtensor":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard

        mesh = init_device_mesh("cpu", (world,))

        def fn(local):
            dt = DTensor.from_local(local * 0.5 + 1.0, mesh, [Shard(0)], run_check=False)
            return compute(dt.redistribute(mesh, [Shard(1)]).to_local())
        return fn
    raise ValueError(f"unknown case {case}")


def reference(case: str, full: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rank `rank`'s result, from the unsharded matrix."""
    m = COLS_PER_RANK
    moved = (full.float() * 0.5 + 1.0).to(full.dtype)
    if case == "uneven":  # the rows each rank receives, as the splits of make_fn move them
        n = ROWS_PER_RANK
        pieces = []
        for p in range(world):  # rank p's send buffer: column blocks of its rows, in rank order
            send = columns_to_rows(moved[p * n:(p + 1) * n], world)
            sizes = [n] * world
            if p == 0:
                sizes[0], sizes[-1] = n + 1, n - 1
            start = sum(sizes[:rank])
            pieces.append(send[start:start + sizes[rank]])
        return compute(torch.cat(pieces))
    return compute(moved[:, rank * m:(rank + 1) * m])


def run_case(case: str, dtype: torch.dtype) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    full = full_matrix(world, dtype)
    n = ROWS_PER_RANK
    local = full[rank * n:(rank + 1) * n].contiguous()
    want = reference(case, full, rank, world)
    fn = make_fn(case, world)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="symmflow")
    with torch.no_grad():
        got = compiled(local.to(device())).cpu()
        got2 = compiled(local.to(device())).cpu()
    ok_shape = got.shape == want.shape and got2.shape == want.shape
    err = max((got.float() - want.float()).abs().max().item(),
              (got2.float() - want.float()).abs().max().item()) if ok_shape else float("inf")
    tol = TOLERANCE[dtype] * max(want.float().abs().max().item(), 1.0)
    report = sft.last_report()
    ir = "\n".join(p.ir_text for p in report.partitions)
    return {"case": case, "dtype": str(dtype).split(".")[-1], "rank": rank, "world": world,
            "device": str(device()), "shape": list(got.shape), "want_shape": list(want.shape),
            "max_err": err, "tol": tol, "ok": err <= tol,
            "partitions": report.partition_count, "boundaries": list(report.boundaries),
            "partition_kinds": report.partition_kinds(), "copies_added": report.copies_added(),
            "symm_inputs_produced": report.all_reduce_inputs_in_place(),
            "symm_ops": sorted(set(re.findall(r"symm_mem::\w+", ir)))}


def main() -> int:
    return run_cases(lambda case, dtype_name: run_case(case, DTYPES[dtype_name]), DEVICE, "20")

if __name__ == "__main__":
    sys.exit(main())
