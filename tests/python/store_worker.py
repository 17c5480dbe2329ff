"""One rank of a process world for test_store.py: joins through a torch TCPStore given as Python
callbacks and runs one scenario, writing what it got to <out>/rank<r>.npz (or .err).

Usage: python store_worker.py SCENARIO RANK WORLD PORT OUT_DIR
Scenarios: session (an all-reduce program through a Session), eager (empty_symmetric + call_op
one_shot_all_reduce over the world, then over a group of ranks 0 and 1), raise (rank 1 raises before the collective; the others record their error), late (an atexit
handler registered before symmflow's calls in after symmflow shut down).
"""
from __future__ import annotations

import atexit
import datetime
import os
import sys
import threading
import time

import numpy as np

PROGRAM = """group tp
graph ar(x: f32[8, 16], w: f32[16, 12]) {
  h = aten::mm(x, w)
  r = symm_mem::one_shot_all_reduce(h, "sum", "tp")
  return r
}
"""

STAGED = """group tp
graph staged(x: f32[8, 12]) {
  r = symm_mem::one_shot_all_reduce(x, "sum", "tp")
  return r
}
"""


def inputs(rank: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(100 + rank)
    return (rng.standard_normal((8, 16), dtype=np.float32),
            rng.standard_normal((16, 12), dtype=np.float32))


def main() -> None:
    scenario, rank, world, port, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    sys.path.insert(0, os.environ["SYMMFLOW_PYTHON_PATH"])
    import symmflow
    from torch.distributed import TCPStore

    late: dict = {}
    if scenario == "late":
        # Registered before symmflow's own exit handler, so it runs after symmflow shut down
        # (atexit is LIFO): every call refuses, none crashes (Note [use after shutdown]).
        def after_shutdown() -> None:
            lines = []
            for what, call in (("barrier", lambda: late["rank"].barrier("late")),
                               ("call_op", lambda: symmflow.call_op(
                                   late["rank"], "symm_mem::one_shot_all_reduce", late["t"],
                                   "sum", "world")),
                               ("empty_symmetric",
                                lambda: symmflow.empty_symmetric(late["rank"], [4]))):
                try:
                    call()
                    lines.append(f"{what}: no error")
                except symmflow.Error as e:
                    lines.append(f"{what}: {type(e).__name__}: {e}")
            with open(f"{out}/rank{rank}.late", "w") as f:
                f.write("\n".join(lines))

        atexit.register(after_shutdown)
    store = TCPStore("127.0.0.1", port, world_size=None, is_master=False,
                     timeout=datetime.timedelta(seconds=30))
    r = symmflow.init_store(**symmflow.store_callbacks(store), rank=rank, world_size=world,
                            prefix=f"test-{scenario}", timeout_s=8)
    assert (r.rank, r.world_size, r.transport) == (rank, world, "store")
    if scenario == "session":
        # The GIL is released while C++ waits: a Python thread ticks while rank 0 waits in a
        # barrier for a rank that arrives a second late.
        ticks = [0]
        done = threading.Event()

        def tick() -> None:
            while not done.is_set():
                ticks[0] += 1
                time.sleep(0.01)

        ticker = threading.Thread(target=tick)
        ticker.start()
        if rank != 0:
            time.sleep(1.0)
        r.barrier("late")
        done.set()
        ticker.join()
        s = symmflow.Session(symmflow.compile(PROGRAM, world_size=world), r)
        (out_array,) = s.run(list(inputs(rank)))
        # A symmetric tensor of the staging group fed straight to an all-reduce: no copy-in.
        staged = symmflow.Session(symmflow.compile(STAGED, world_size=world), r)
        t = symmflow.empty_symmetric(r, [8, 12], dtype="f32", group="tp")
        np.from_dlpack(t)[...] = np.float32(rank + 1)
        (in_place,) = staged.run([t])
        np.savez(f"{out}/rank{rank}.npz", r=np.from_dlpack(out_array),
                 in_place=np.from_dlpack(in_place),
                 in_place_stats=np.array([staged.last_stats["copies"],
                                          staged.last_stats["input_copies_skipped"]]),
                 gathered=np.array([len(b) for b in r.allgather(b"x" * (rank + 1), "sizes")]),
                 ticks=np.array(ticks[0]))
    elif scenario == "eager":
        t = symmflow.empty_symmetric(r, [8, 12], dtype="f32", group="world")
        x, w = inputs(rank)
        np.from_dlpack(t)[...] = x @ w
        r.barrier("filled")
        (got,) = symmflow.call_op(r, "symm_mem::one_shot_all_reduce", t, "sum", "world")
        results = {"r": np.from_dlpack(got)}
        if rank < 2:  # a group of ranks 0 and 1 only: the others need not call
            r.new_group("pair", [0, 1])
            p = symmflow.empty_symmetric(r, [3], dtype="f32", group="pair")
            np.from_dlpack(p)[...] = np.float32(rank + 1)
            (pair_sum,) = symmflow.call_op(r, "symm_mem::one_shot_all_reduce", p, "sum", "pair")
            results["pair"] = np.from_dlpack(pair_sum)
        np.savez(f"{out}/rank{rank}.npz", **results)
    elif scenario == "late":
        late["rank"], late["t"] = r, symmflow.empty_symmetric(r, [4], group="world")
        r.barrier("before exit")
    elif scenario == "raise":
        if rank == 1:
            raise RuntimeError("boom on rank 1")
        try:
            s = symmflow.Session(symmflow.compile(PROGRAM, world_size=world), r)
            s.run(list(inputs(rank)))
            r.barrier("after run")
        except symmflow.Error as e:
            with open(f"{out}/rank{rank}.err", "w") as f:
                f.write(f"{type(e).__name__}: {e}")
            return
        raise AssertionError("rank 1 raised but this rank did not fail")


if __name__ == "__main__":
    main()
