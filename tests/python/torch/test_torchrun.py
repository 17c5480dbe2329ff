"""torch.compile(backend="symmflow") under torchrun on CPU (gloo), 2 and 4 processes (issue 17).

Each test launches `torchrun --nproc-per-node N worker.py CASES DTYPES` with a hard timeout and
checks every rank's RESULT line: compiled results equal eager (or a gloo reference) within the
dtype's tolerance, explain's facts (partitions, boundaries, no added copy, all-reduce inputs
produced in symmetric memory), and the failure cases (a raising rank named on every peer in time,
ranks binding different shapes refused naming the input).
"""
from __future__ import annotations

import json
import os
import socket
import shutil
import subprocess
import sys
import tempfile

import pytest

import symmflow

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(nproc: int, cases: str, dtypes: str = "f32", timeout: float = 240, env=None,
           worker: str = WORKER):
    """Runs `worker` on `nproc` ranks; returns (returncode, [RESULT dicts], output)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
           "--master-addr=127.0.0.1", f"--master-port={_free_port()}", "--max-restarts=0",
           worker, cases, dtypes]
    folder = tempfile.mkdtemp(prefix="symmflow_torchrun_")
    package = os.path.dirname(os.path.dirname(os.path.abspath(symmflow.__file__)))
    path = os.pathsep.join(p for p in (package, os.environ.get("PYTHONPATH")) if p)
    full_env = dict(os.environ, OMP_NUM_THREADS="1", SYMMFLOW_TEST_RESULTS=folder,
                    PYTHONPATH=path, **(env or {}))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun of {cases} on {nproc} ranks hung past {timeout} s:\n"
                    f"{(e.stdout or '')[-4000:]}\n{(e.stderr or '')[-4000:]}")
    output = proc.stdout + proc.stderr
    results = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            results += [json.loads(line) for line in f if line.strip()]
    shutil.rmtree(folder, ignore_errors=True)
    return proc.returncode, results, output


def expected_runs(cases, dtypes: str) -> int:
    """The runs a model worker makes of `cases` (a list) in `dtypes` (comma-separated): every
    dtype for a plain case, one for a case written `case@dtype` (worker.run_cases)."""
    return sum(1 if "@" in c else len(dtypes.split(",")) for c in cases)


def check_all_ok(nproc, results, output, expected_per_rank):
    assert len(results) == nproc * expected_per_rank, output[-6000:]
    bad = [r for r in results if not r["ok"]]
    assert not bad, json.dumps(bad, indent=1)[-6000:]


# The model cases and the symm_mem cases of one process count share a launch (a launch of 4
# processes costs about 10 s on two cores before its first case): each test checks its own.
MODEL_CASES = ["mlp", "decoder", "decoder_sp"]
SYMM_CASES = ["input_allreduce", "inplace_allreduce", "ring", "eager"]
_shared: dict[int, tuple] = {}


def shared_launch(nproc: int):
    """(returncode, results, output) of one launch of every case of MODEL_CASES and SYMM_CASES
    in f32 and bf16 on `nproc` ranks, made once per process count."""
    if nproc not in _shared:
        _shared[nproc] = launch(nproc, ",".join(MODEL_CASES + SYMM_CASES), "f32,bf16")
    return _shared[nproc]


def _of(results, cases):
    return [r for r in results if r["case"] in cases]


@pytest.mark.parametrize("nproc", [2, 4])
def test_mlp_and_decoder_match_eager(nproc):
    rc, all_results, out = shared_launch(nproc)
    results = _of(all_results, MODEL_CASES)
    check_all_ok(nproc, results, out, 6)
    assert rc == 0, out[-4000:]
    for r in results:
        # Explain: one partition each, every all-reduce input produced in symmetric memory and no
        # copy added by the compiler.
        assert r["partitions"] == 1, r
        assert r["boundaries"] == [], r
        assert r["copies_added"] == 0, r
        assert r["explain_ok"], r
        if r["case"] in ("mlp", "decoder"):
            assert r["symm_inputs_produced"] is True, r


def test_an_unsupported_op_in_the_block_gives_two_boundaries_and_the_same_results():
    rc, results, out = launch(2, "decoder_unsupported", "f32")
    check_all_ok(2, results, out, 1)
    for r in results:
        assert r["partition_kinds"] == ["symmflow", "torch", "symmflow"], r
        assert len(r["boundaries"]) == 2, r
        assert all("aten.i0.default at node i0 is not in symmflow's catalogue" in b
                   for b in r["boundaries"]), r
        assert r["copies_added"] == 0, r


@pytest.mark.parametrize("nproc", [2, 4])
def test_symm_mem_cases_torch_compile_refuses_and_eager_ops(nproc):
    rc, all_results, out = shared_launch(nproc)
    check_all_ok(nproc, _of(all_results, SYMM_CASES), out, 8)
    assert rc == 0, out[-4000:]


def test_a_raising_rank_is_named_on_every_peer():
    rc, results, out = launch(3, "raise", env={"SYMMFLOW_TEST_TIMEOUT_S": "10"}, timeout=120)
    assert len(results) == 3, out[-6000:]
    for r in results:
        assert r["ok"], json.dumps(results, indent=1)
        assert r["seconds"] < 60, r


def test_ranks_binding_different_shapes_are_refused_naming_the_input():
    rc, results, out = launch(2, "shapes", env={"SYMMFLOW_TEST_TIMEOUT_S": "10"}, timeout=120)
    assert len(results) == 2, out[-6000:]
    for r in results:
        assert r["ok"], json.dumps(results, indent=1)


def test_the_readme_example_runs_under_torchrun(tmp_path):
    """README's "From PyTorch" example, extracted and run as written on 2 ranks."""
    readme = open(os.path.join(HERE, "..", "..", "..", "README.md")).read()
    section = readme.split("\n## From PyTorch\n", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "tp_mlp.py"
    script.write_text(code)
    package = os.path.dirname(os.path.dirname(os.path.abspath(symmflow.__file__)))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
           "--master-addr=127.0.0.1", f"--master-port={_free_port()}", str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                          env=dict(os.environ, PYTHONPATH=package, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "compiler-added copies: 0" in proc.stdout, proc.stdout[-4000:]
    assert "symmflow: 1 partition(s), 0 boundary(ies)" in proc.stdout, proc.stdout[-4000:]
