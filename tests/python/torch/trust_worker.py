"""One rank of issue 25's torchrun cases (tests/python/torch/test_trust.py), on CPU over gloo.

    torchrun --nproc-per-node N tests/python/torch/trust_worker.py CASE

Each case prints one `RESULT {...}` line per rank (and appends it to
$SYMMFLOW_TEST_RESULTS/rank<r>.jsonl, as worker.py does):
- "disagree": eager torch.ops.symmflow.one_shot_all_reduce with rank 1 passing "max" where the
  others pass "sum", then int32 where the others pass float32 (the same bytes): every rank raises,
  naming the field and each rank's value; the group is then poisoned (Note [poisoned groups]):
  the next call raises naming that first error, and a new group of the same ranks gives the
  right sum.
- "subgroup": new_group([0, 1]) in a world of 4 that joined symmflow; ranks 0 and 1 all-reduce on
  it eagerly while ranks 2 and 3 stay idle until gloo tells them the pair is done: no wait for the
  idle ranks.
- "finished": rank 1 leaves after one all-reduce; rank 0's next one raises PeerFailure naming
  rank 1 as finished, at once rather than after SYMMFLOW_TIMEOUT_S.
- "barrier": torch.ops.symmflow.barrier eagerly on every rank (it has no tensor argument).
- "attacker": a third process reads and plants symmflow's keys in torchrun's store; ignored.
- "compiled_recovery" / "compiled_timeout": a compiled graph on a group that failed (a
  disagreement / rank 1 arriving past a short SYMMFLOW_TIMEOUT_S) raises at every later call; a
  new group recovers.
- "uncaught": rank 1 raises an uncaught RuntimeError between two all-reduces; rank 0's second
  names it ("rank 1 failed (uncaught RuntimeError: ...)"), not "rank 1 has finished".
SYMMFLOW_TIMEOUT_S is set by the test (20 s); "seconds" is how long the awaited call took.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

import symmflow
import symmflow.torch as sft


def emit(result: dict) -> None:
    line = json.dumps(result)
    sys.stdout.write(f"RESULT {line}\n")
    sys.stdout.flush()
    folder = os.environ.get("SYMMFLOW_TEST_RESULTS")
    if folder:
        with open(os.path.join(folder, f"rank{result['rank']}.jsonl"), "a") as f:
            f.write(line + "\n")


def _error_of(fn) -> str:
    try:
        fn()
        return ""
    except Exception as e:  # noqa: BLE001 - the message is the result
        return f"{type(e).__name__}: {e}"


def run_disagree(rank: int, world: int) -> dict:
    group = dist.group.WORLD.group_name
    x = sft.empty((4,), dtype=torch.float32)
    x.fill_(rank + 1)
    reduce_op = _error_of(lambda: torch.ops.symmflow.one_shot_all_reduce(
        x, "max" if rank == 1 else "sum", group))
    after = _error_of(lambda: torch.ops.symmflow.one_shot_all_reduce(x, "sum", group))
    # Recovery: a new group of the same ranks, its own symmetric memory.
    fresh = dist.new_group(list(range(world)))
    y = sft.empty((4,), dtype=torch.int32 if rank == 1 else torch.float32, group=fresh)
    dtype = _error_of(lambda: torch.ops.symmflow.one_shot_all_reduce(
        y, "sum", fresh.group_name))
    again = dist.new_group(list(range(world)))
    z = sft.empty((4,), dtype=torch.float32, group=again)
    z.fill_(rank + 1)
    total = torch.ops.symmflow.one_shot_all_reduce(z, "sum", again.group_name)
    others = [str(r) for r in range(world) if r != 1]
    others = ("rank " if len(others) == 1 else "ranks ") + ", ".join(others)
    want_op = f"reduce op: sum on {others}; max on rank 1"
    want_dtype = f"dtype: f32 on {others}; i32 on rank 1"
    ok = (want_op in reduce_op and want_dtype in dtype and "InvalidUsage" in reduce_op
          and "symm_mem::one_shot_all_reduce: the ranks of group" in reduce_op
          and f"is poisoned: a collective failed on rank {rank} at " in after
          and want_op in after
          and total.tolist() == [world * (world + 1) / 2] * 4)
    return {"case": "disagree", "rank": rank, "ok": ok, "reduce_op": reduce_op[:600],
            "after": after[:600], "dtype": dtype[:600], "total": total.tolist()}


def run_subgroup(rank: int, world: int) -> dict:
    pair = dist.new_group([0, 1])  # every rank makes it, as torch requires
    done = dist.new_group(list(range(world)))  # gloo: tells the idle ranks when to leave
    sft.init()  # joining symmflow's world is collective over the world (as init_process_group)
    took, got = 0.0, None
    if rank in (0, 1):
        x = sft.empty((4,), dtype=torch.float32, group=pair)
        x.fill_(rank + 1)
        start = time.monotonic()
        got = torch.ops.symmflow.one_shot_all_reduce(x, "sum", pair.group_name).tolist()
        took = time.monotonic() - start
    dist.barrier(group=done)  # the idle ranks never touched symmflow until here
    ok = rank not in (0, 1) or (got == [3.0] * 4 and took < 10)
    return {"case": "subgroup", "rank": rank, "ok": ok, "got": got, "seconds": took}


def run_finished(rank: int, world: int) -> dict:
    group = dist.group.WORLD.group_name
    x = sft.empty((4,), dtype=torch.float32)
    torch.ops.symmflow.one_shot_all_reduce(x, "sum", group)
    if rank == 1:
        return {"case": "finished", "rank": rank, "ok": True}  # leaves: the process exits
    time.sleep(1.0)  # rank 1 is gone by now
    start = time.monotonic()
    message = _error_of(lambda: torch.ops.symmflow.one_shot_all_reduce(x, "sum", group))
    took = time.monotonic() - start
    ok = "rank 1 has finished" in message and took < 10
    return {"case": "finished", "rank": rank, "ok": ok, "message": message[:600], "seconds": took}


def run_uncaught(rank: int, world: int) -> dict:
    """Rank 1 raises an uncaught exception between two all-reduces (its excepthook aborts the
    world); rank 0, already waiting in the second, must name that failure and its text, never
    "finished" (issue 39 item 9)."""
    group = dist.group.WORLD.group_name
    x = sft.empty((4,), dtype=torch.float32)
    torch.ops.symmflow.one_shot_all_reduce(x, "sum", group)
    if rank == 1:
        raise RuntimeError("boom from rank 1")  # uncaught: main() lets it out
    start = time.monotonic()
    message = _error_of(lambda: torch.ops.symmflow.one_shot_all_reduce(x, "sum", group))
    took = time.monotonic() - start
    # Either form names rank 1 and its words: "rank 1 failed (uncaught ...)" when rank 0 was
    # waiting, "group ... is poisoned: a collective failed on rank 1 at ... (uncaught ...)" when
    # rank 1's failure reached the group's pads before rank 0 called (Note [poisoned groups]).
    ok = (("rank 1 failed (uncaught RuntimeError: boom from rank 1)" in message
           or "failed on rank 1 at" in message
           and "(uncaught RuntimeError: boom from rank 1)" in message)
          and "finished" not in message and took < 10)
    return {"case": "uncaught", "rank": rank, "ok": ok, "message": message[:600], "seconds": took}


def run_barrier(rank: int, world: int) -> dict:
    group = dist.group.WORLD.group_name
    start = time.monotonic()
    message = _error_of(lambda: torch.ops.symmflow.barrier(group, 0))
    took = time.monotonic() - start
    return {"case": "barrier", "rank": rank, "ok": message == "" and took < 10,
            "message": message[:600], "seconds": took}


ATTACKER = r"""
import datetime, json, os, sys
from torch.distributed import TCPStore
s = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
             timeout=datetime.timedelta(seconds=10))
keys = [k for k in s.list_keys() if "symmflow/" in k]
pids = sys.argv[1:]
leaked = [k for k in keys if "/hello/" in k and any(p.encode() in bytes(s.get(k)) for p in pids)]
poison = [k for k in keys if k.endswith("symmflow/hello/0")][0].replace("hello/0", "poison")
s.set(poison, b"1\nplanted by another process")
s.add(poison.replace("poison", "poison_claim"), 1)
print(json.dumps({"keys": len(keys), "leaked": leaked, "poison": poison}))
"""


def run_attacker(rank: int, world: int) -> dict:
    """Issue 39 item 7: a third local process that reaches torchrun's TCPStore reads symmflow's
    hellos (sealed: no pid in them) and plants a poison and a poison claim; the world ignores
    them and its next all-reduce is right (Note [sealed store values])."""
    import subprocess
    group = dist.group.WORLD.group_name
    x = sft.empty((4,), dtype=torch.float32)  # joins the symmflow world
    pids: list = [None] * world
    dist.all_gather_object(pids, os.getpid())
    seen = {}
    if rank == 0:
        out = subprocess.run([sys.executable, "-c", ATTACKER, *map(str, pids)], check=True,
                             capture_output=True, text=True, timeout=60).stdout
        seen = json.loads(out.strip().splitlines()[-1])
    dist.barrier()
    time.sleep(0.5)  # past every rank's look at the store's poison key
    x.fill_(float(rank + 1))
    y = torch.ops.symmflow.one_shot_all_reduce(x, "sum", group)
    right = bool((y == world * (world + 1) / 2).all())
    ok = right and (rank != 0 or (seen["keys"] >= world and not seen["leaked"]))
    return {"case": "attacker", "rank": rank, "ok": ok, "seen": seen, "right": right}


def _compiled_all_reduce(world: int):
    """A compiled 2x, all-reduce, +1 on a new group of every rank: (function, its group)."""
    import torch.distributed._functional_collectives as funcol

    pg = dist.new_group(list(range(world)))
    return torch.compile(lambda x: funcol.all_reduce(x * 2.0, "sum", pg) + 1.0,
                         backend="symmflow"), pg


def run_compiled_recovery(rank: int, world: int) -> dict:
    """Issue 39 under torch.compile: after a collective of a group failed (an eager disagreement
    on it), every later compiled call on that group raises; the documented recovery, a new c10d
    group of the same ranks, compiles to fresh symmflow groups and gives right results."""
    compiled, pg = _compiled_all_reduce(world)
    x = torch.full((8,), float(rank + 1))
    want = torch.full((8,), float(world * (world + 1) + 1))
    before = torch.equal(compiled(x), want)
    s = sft.empty((4,), dtype=torch.float32, group=pg)
    failed = _error_of(lambda: torch.ops.symmflow.one_shot_all_reduce(
        s, "sum" if rank == 0 else "max", pg.group_name))
    later = [_error_of(lambda: compiled(x)) for _ in range(5)]
    recovered, _ = _compiled_all_reduce(world)
    after = [torch.equal(recovered(x), want) for _ in range(3)]
    ok = (before and "disagree on reduce op" in failed and all(after)
          and all("is poisoned" in m and "disagree on reduce op" in m for m in later))
    return {"case": "compiled_recovery", "rank": rank, "ok": ok, "failed": failed[:300],
            "later": [m[:300] for m in later[:1]], "after": after}


def run_compiled_timeout(rank: int, world: int) -> dict:
    """Issue 39 item 2 under torch.compile: rank 1 comes late (past SYMMFLOW_TIMEOUT_S, which the
    test sets low); rank 0's compiled call raises Timeout, and so does every retry of it (the
    group is poisoned), rank 1's late call included; a new group recovers on both ranks."""
    compiled, _ = _compiled_all_reduce(world)
    x = torch.full((4096,), float(rank + 1))
    want = torch.full((4096,), float(world * (world + 1) + 1))
    dist.barrier()
    before = torch.equal(compiled(x), want)
    dist.barrier()
    timeout = float(os.environ["SYMMFLOW_TIMEOUT_S"])
    if rank == 1:
        time.sleep(timeout + 3)
    first = _error_of(lambda: compiled(x))
    retries = [_error_of(lambda: compiled(x)) for _ in range(6)]
    dist.barrier()  # gloo's: the late rank has called too
    recovered, _ = _compiled_all_reduce(world)
    after = [torch.equal(recovered(x), want) for _ in range(3)]
    raised = [first] + retries
    ok = (before and all(after) and all(m for m in raised)
          and all("Timeout" in m or "timed out" in m for m in raised))
    if rank == 0:  # its own Timeout first, then the poison naming it
        ok = ok and "timed out" in first and all("is poisoned" in m for m in retries)
    return {"case": "compiled_timeout", "rank": rank, "ok": ok, "first": first[:300],
            "retries": [m[:300] for m in retries[:1]], "raised": sum(bool(m) for m in raised),
            "after": after}


CASES = {"compiled_recovery": run_compiled_recovery, "compiled_timeout": run_compiled_timeout,
         "disagree": run_disagree, "subgroup": run_subgroup, "finished": run_finished,
         "barrier": run_barrier, "uncaught": run_uncaught, "attacker": run_attacker}


def main() -> int:
    case = sys.argv[1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if case == "uncaught" and rank == 1:
        CASES[case](rank, world)  # raises, uncaught: the interpreter's excepthook sees it
    try:
        result = CASES[case](rank, world)
    except Exception:  # noqa: BLE001 - reported as a failed case
        result = {"case": case, "rank": rank, "ok": False, "error": traceback.format_exc()[-3000:]}
    emit(result)
    if case not in ("finished", "uncaught"):
        dist.destroy_process_group()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
