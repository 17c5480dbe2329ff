"""The torch.compile backend's per-call cost on this machine's CPU, beside inductor's, in one run.

    PYTHONPATH=build/release/python python3 tools/backend_overhead.py [calls]

A one-op graph (`x * 2` on a 16 x 64 tensor, world 1 over gloo) compiled by symmflow, called
through torch.compile with the one-partition call (Note [one-partition call] in _backend.py) and
without it (the split graph module, as before it), beside the same partition's Session.run
called directly, inductor's compiled function and the op in eager. Medians of `calls` calls in
microseconds, rounds alternating; what the backend adds is its call minus Session.run.
"""
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import symmflow.torch  # noqa: F401  (registers the backend)
from symmflow.torch import _backend


def median_us(fn, calls):
    for _ in range(200):
        fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def compiled_symmflow(direct: bool):
    keep = _backend._direct_call
    if not direct:
        _backend._direct_call = lambda gm: None
    try:
        torch._dynamo.reset()
        fn = torch.compile(lambda t: t * 2.0, backend="symmflow")
        fn(X)
        return fn, _backend.last_session()
    finally:
        _backend._direct_call = keep


def main():
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    rows = {}
    with torch.no_grad():
        for _ in range(3):
            for direct in (True, False):
                fn, session = compiled_symmflow(direct)
                name = "backend call" + ("" if direct else ", split module (before)")
                rows.setdefault(name, []).append(median_us(lambda: fn(X), calls))
                rows.setdefault("Session.run", []).append(median_us(lambda: session.run([X]), calls))
            torch._dynamo.reset()
            inductor = torch.compile(lambda t: t * 2.0)
            inductor(X)
            rows.setdefault("inductor call", []).append(median_us(lambda: inductor(X), calls))
            rows.setdefault("eager op", []).append(median_us(lambda: X * 2.0, calls))
    print(f"per-call cost on the CPU, medians of {calls} calls, 3 rounds (us)")
    for name, values in rows.items():
        print(f"  {name:<40} {statistics.median(values):7.1f}   rounds {' '.join(f'{v:.1f}' for v in values)}")


if __name__ == "__main__":
    store_dir = tempfile.mkdtemp(prefix="symmflow_overhead_")
    dist.init_process_group("gloo", store=dist.FileStore(os.path.join(store_dir, "store"), 1),
                            rank=0, world_size=1)
    X = torch.randn(16, 64)
    try:
        main()
    finally:
        dist.destroy_process_group()
        shutil.rmtree(store_dir, ignore_errors=True)
