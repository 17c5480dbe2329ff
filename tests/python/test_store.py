"""Process worlds: 2 and 3 processes join through a torch TCPStore wrapped as init_store's Python
callbacks (store_worker.py), run an all-reduce through a Session and eagerly through call_op on
empty_symmetric tensors (checked against numpy), and a rank that raises is named by its peers.
Every world runs under a hard timeout and is killed when it runs out."""
from __future__ import annotations

import datetime
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("torch")
from torch.distributed import TCPStore  # noqa: E402

import store_worker  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
TIMEOUT_S = 90


def run_world(scenario: str, world: int, out: pathlib.Path) -> tuple[list[int], float]:
    """Starts `world` worker processes against a fresh TCPStore served here; returns their exit
    codes and the seconds they took, killing all of them past TIMEOUT_S."""
    server = TCPStore("127.0.0.1", 0, world_size=None, is_master=True,
                      timeout=datetime.timedelta(seconds=30))
    env = dict(os.environ)
    env["SYMMFLOW_PYTHON_PATH"] = sys.path[0] if "SYMMFLOW_PYTHON_PATH" not in env else env["SYMMFLOW_PYTHON_PATH"]
    start = time.monotonic()
    procs = [subprocess.Popen([sys.executable, str(HERE / "store_worker.py"), scenario, str(r),
                               str(world), str(server.port), str(out)], env=env)
             for r in range(world)]
    codes = []
    try:
        for p in procs:
            codes.append(p.wait(timeout=max(1.0, TIMEOUT_S - (time.monotonic() - start))))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    del server
    return codes, time.monotonic() - start


def reference(world: int) -> np.ndarray:
    return sum(np.float64(1) * (x.astype(np.float64) @ w.astype(np.float64))
               for x, w in (store_worker.inputs(r) for r in range(world)))


@pytest.mark.parametrize("world", [2, 3])
def test_session_allreduce_processes(world, tmp_path):
    codes, _ = run_world("session", world, tmp_path)
    assert codes == [0] * world
    for r in range(world):
        got = np.load(tmp_path / f"rank{r}.npz")
        np.testing.assert_allclose(got["r"], reference(world), rtol=1e-4, atol=1e-4)
        assert got["gathered"].tolist() == list(range(1, world + 1))
        assert got["in_place_stats"].tolist() == [0, 1]  # no copy, one copy-in skipped
        np.testing.assert_array_equal(got["in_place"],
                                      np.full((8, 12), world * (world + 1) / 2, np.float32))
    assert int(np.load(tmp_path / "rank0.npz")["ticks"]) >= 20  # ran during a 1 s barrier


@pytest.mark.parametrize("world", [2, 3])
def test_empty_symmetric_call_op_processes(world, tmp_path):
    codes, _ = run_world("eager", world, tmp_path)
    assert codes == [0] * world
    want = sum(np.float64(1) * (x @ w) for x, w in (store_worker.inputs(r) for r in range(world)))
    for r in range(world):
        got = np.load(tmp_path / f"rank{r}.npz")
        np.testing.assert_allclose(got["r"], want, rtol=1e-4, atol=1e-4)
        if r < 2:
            np.testing.assert_array_equal(got["pair"], np.full(3, 3.0, np.float32))


def test_a_raising_rank_is_named_by_its_peers(tmp_path):
    world = 3
    codes, seconds = run_world("raise", world, tmp_path)
    assert codes[1] != 0 and codes[0] == 0 and codes[2] == 0
    assert seconds < 60
    for r in (0, 2):
        text = (tmp_path / f"rank{r}.err").read_text()
        # By timing: rank r was waiting for rank 1, or the world's poison came before its call,
        # or a peer recorded the failure in the group first; each names rank 1 and its words.
        assert text.startswith("PeerFailure: Executable: "), text
        assert "rank 1 failed (uncaught RuntimeError: boom on rank 1)" in text, text


def test_calls_after_shutdown_raise_and_do_not_crash(tmp_path):
    """Issue 39 item 6: an atexit handler registered before symmflow's runs after symmflow left
    its world; its calls raise "symmflow has shut down" (they were a SIGSEGV)."""
    codes, _ = run_world("late", 2, tmp_path)
    assert codes == [0, 0]
    for r in range(2):
        lines = (tmp_path / f"rank{r}.late").read_text().splitlines()
        gone = (f"InvalidUsage: group 'world': symmflow has shut down (rank {r} left its world at "
                "exit or by shutdown); no call runs after it")
        assert lines == [f"barrier: {gone}", f"call_op: {gone}", f"empty_symmetric: {gone}"]
