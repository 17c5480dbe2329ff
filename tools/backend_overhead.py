"""The torch.compile backend's per-call cost on this machine's CPU, beside inductor's, in one run.

    PYTHONPATH=build/release/python python3 tools/backend_overhead.py [calls]

Two graphs (world 1 over gloo): one op over one input (`x * 2` on a 16 x 64 tensor) and a sum of
products over 12 inputs (the decoder layer's count: activations and weights), each compiled by
symmflow and called through torch.compile: the steady-state pointer call (Note [pointer call] in
python/symmflow/torch/_runner.py), the same with every tensor converted through DLPack (as before
it), and, for the one-input graph, through the split graph module (as before Note [one-partition
call] in _backend.py); beside the partition's Session.run called directly, inductor's compiled
function and the ops in eager. Medians of `calls` calls in microseconds, rounds alternating;
what the backend adds is its call minus Session.run.
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
from symmflow.torch._runner import PartitionRunner


def median_us(fn, calls):
    for _ in range(200):
        fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def one_input(t):
    return t * 2.0


def twelve_inputs(*ts):
    acc = ts[0] * ts[1]
    for i in range(2, 12, 2):
        acc = acc + ts[i] * ts[i + 1]
    return acc


def compiled_symmflow(fn, args, direct: bool = True):
    keep = _backend._direct_call
    if not direct:
        _backend._direct_call = lambda gm: None
    try:
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="symmflow")
        compiled(*args)
        return compiled, _backend.last_session()
    finally:
        _backend._direct_call = keep


def measure(rows, label, fn, args, calls, split_module):
    def row(name, value):
        rows.setdefault(f"{label}: {name}", []).append(value)

    for pointers in (True, False):
        PartitionRunner.pointer_path = pointers
        compiled, session = compiled_symmflow(fn, args)
        row("backend call" + ("" if pointers else ", DLPack (before)"),
            median_us(lambda: compiled(*args), calls))
    PartitionRunner.pointer_path = True
    if split_module:
        compiled, _ = compiled_symmflow(fn, args, direct=False)
        row("backend call, split module (before)", median_us(lambda: compiled(*args), calls))
    row("Session.run", median_us(lambda: session.run(list(args)), calls))
    torch._dynamo.reset()
    inductor = torch.compile(fn)
    inductor(*args)
    row("inductor call", median_us(lambda: inductor(*args), calls))
    row("eager", median_us(lambda: fn(*args), calls))


def main():
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    rows = {}
    x = (torch.randn(16, 64),)
    xs = tuple(torch.randn(16, 64) for _ in range(12))
    with torch.no_grad():
        for _ in range(3):
            measure(rows, "1 input", one_input, x, calls, split_module=True)
            measure(rows, "12 inputs", twelve_inputs, xs, calls, split_module=False)
    print(f"per-call cost on the CPU, medians of {calls} calls, 3 rounds (us)")
    for name, values in rows.items():
        print(f"  {name:<48} {statistics.median(values):7.1f}   rounds "
              f"{' '.join(f'{v:.1f}' for v in values)}")


if __name__ == "__main__":
    store_dir = tempfile.mkdtemp(prefix="symmflow_overhead_")
    dist.init_process_group("gloo", store=dist.FileStore(os.path.join(store_dir, "store"), 1),
                            rank=0, world_size=1)
    try:
        main()
    finally:
        dist.destroy_process_group()
        shutil.rmtree(store_dir, ignore_errors=True)
