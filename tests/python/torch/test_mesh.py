"""A 2-D mesh (TP inside a host, DP across hosts) trained with backend="symmflow" under
`torchrun --nnodes 2 --nproc-per-node 2` (issue 38): two launchers on this machine, each one
simulated host (SYMMFLOW_HOST_ID), one c10d rendezvous on 127.0.0.1.

The worker (mesh_worker.py) trains a transformers Llama made tensor-parallel with DTensor over
mesh["tp"] and data-parallel over mesh["dp"] (examples/pytorch/data_parallel.py, DDP's "replicate"
and FSDP's "fully_shard"), eagerly and compiled, and compares every step's loss and every step-1
gradient; here every rank's result is checked, and explain's facts: one partition for the
forward and one for the backward, the tensor-parallel collectives inside a host on symmetric
memory, the data-parallel ones across the hosts through the exchange.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from test_torchrun import _free_port

import symmflow

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "mesh_worker.py")


def launch_hosts(hosts: int, nproc: int, cases: str, dtypes: str = "f32", timeout: float = 300):
    """One torchrun launcher per simulated host, all joining one rendezvous; returns
    ([returncode per launcher], [RESULT dicts], output)."""
    port = _free_port()
    folder = tempfile.mkdtemp(prefix="symmflow_mesh_")
    package = os.path.dirname(os.path.dirname(os.path.abspath(symmflow.__file__)))
    path = os.pathsep.join(p for p in (package, os.environ.get("PYTHONPATH")) if p)
    procs = []
    for host in range(hosts):
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={hosts}",
               f"--node-rank={host}", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
               f"--master-port={port}", "--max-restarts=0", WORKER, cases, dtypes]
        env = dict(os.environ, OMP_NUM_THREADS="1", SYMMFLOW_TEST_RESULTS=folder,
                   PYTHONPATH=path, SYMMFLOW_HOST_ID=str(host))
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=env))
    outputs, codes = [], []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            outputs.append(out)
            codes.append(p.returncode)
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"the {hosts} launchers of {cases} hung past {timeout} s")
    results = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            results += [json.loads(line) for line in f if line.strip()]
    shutil.rmtree(folder, ignore_errors=True)
    return codes, results, "\n".join(outputs)


def test_tp_inside_dp_across_two_hosts_equals_eager():
    codes, results, out = launch_hosts(2, 2, "llama:replicate,llama:fully_shard")
    assert len(results) == 4 * 2, out[-6000:]
    bad = [r for r in results if not r["ok"]]
    assert not bad, json.dumps(bad, indent=1)[-6000:]
    assert codes == [0, 0], out[-4000:]
    for r in results:
        assert (r["dp"], r["tp"]) == (2, 2), r
        # One graph for the forward and one for the backward, one partition each.
        assert r["graphs"] == 2 and r["partitions"] == [1, 1], r
        assert r["boundaries"] == [[], []], r
        # The data-parallel mean is the whole batch's gradient, eager and compiled alike.
        assert r["dp_mean_err"] <= 1e-3 and r["grad_err"] <= 1e-3, r
        ops = {(c["pass"], c["op"].split("::")[-1], c["dim"]) for c in r["collectives"]}
        # TP: the row-parallel all-reduces, forward and backward, inside the host on symmetric
        # memory (explain names no host); DP: across both hosts through the exchange.
        assert ("forward", "one_shot_all_reduce", "tp") in ops, ops
        assert ("backward", "one_shot_all_reduce", "tp") in ops, ops
        for c in r["collectives"]:
            assert c["dim"] in ("tp", "dp"), c
            spans = "spans 2 hosts (1 member per host)" in c["why"]
            assert spans == (c["dim"] == "dp"), c
            if c["dim"] == "dp":
                assert c["algorithm"] == "exchange", c
                # On GPUs the same collective goes through NCCL (Note [nccl engine]).
                want = {"one_shot_all_reduce": "nccl all-reduce",
                        "_low_contention_all_gather": "nccl all-gather",
                        "_low_contention_reduce_scatter": "nccl reduce-scatter"}
                assert c["cuda"] == want[c["op"].split("::")[-1]], c
        if r["case"] == "llama:replicate":  # DDP: the gradients' all-reduce (mean)
            assert ("backward", "one_shot_all_reduce", "dp") in ops, ops
            assert not any(d == "dp" for p, _, d in ops if p == "forward"), ops
        else:  # FSDP: the parameters' all-gather, the gradients' reduce-scatter
            assert ("forward", "_low_contention_all_gather", "dp") in ops, ops
            assert ("backward", "_low_contention_reduce_scatter", "dp") in ops, ops
        # Copies: only the graph inputs FSDP all-gathers (the parameters' slices are caller
        # memory) and nothing else.
        for reason in r["copy_reasons"]:
            assert reason.startswith("graph input 'primals_"), reason
    # Both data-parallel ranks of a tensor-parallel position agree on the loss history; the
    # two tensor-parallel ranks of a host see the same loss.
    by_rank = {(r["case"], r["rank"]): r["losses_symmflow"] for r in results}
    for case in ("llama:replicate", "llama:fully_shard"):
        assert by_rank[(case, 0)] == by_rank[(case, 1)], by_rank
        assert by_rank[(case, 2)] == by_rank[(case, 3)], by_rank


class _Mesh:
    """A stand-in for a DeviceMesh: its dimensions, size and this rank's place in it."""

    def __init__(self, ndim=1, size=2, local=0):
        self.ndim, self._size, self._local = ndim, size, local

    def size(self):
        return self._size

    def get_local_rank(self):
        return self._local


def test_data_parallel_refuses_a_bad_mode_a_2d_mesh_and_an_uneven_batch():
    import sys

    import torch

    sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "pytorch"))
    import data_parallel as dpm

    model = torch.nn.Linear(4, 4)
    with pytest.raises(ValueError, match=r"data_parallel: mode 'ddp' is not one of "
                                         r"\('replicate', 'fully_shard'\)"):
        dpm.data_parallel(model, _Mesh(), mode="ddp")
    with pytest.raises(ValueError, match=r"data_parallel: dp_mesh must be 1-D \(a mesh dimension "
                                         r"such as mesh\['dp'\]\), not 2-D"):
        dpm.data_parallel(model, _Mesh(ndim=2))
    with pytest.raises(ValueError, match="batch_slice: a batch of 5 does not split over 2 "
                                         "data-parallel ranks"):
        dpm.batch_slice(torch.zeros(5, 3), _Mesh())
    # A batch that splits: rank 1 of 2 gets the second half, every element.
    batch = torch.arange(12.0).reshape(4, 3)
    assert torch.equal(dpm.batch_slice(batch, _Mesh(local=1)), batch[2:])
