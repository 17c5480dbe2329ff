"""tools/device/sweep.py, the shape sweep (issue 40): its points are parsed or refused with the
form they take, and a tiny sweep runs end to end on one CPU process, each mode's result checked
against eager's, so the GPU tool cannot rot between device runs."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

from test_torchrun import _free_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SWEEP = os.path.join(ROOT, "tools", "device", "sweep.py")


def _sweep_module():
    spec = importlib.util.spec_from_file_location("sweep", SWEEP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_points_are_parsed_and_bad_ones_refused_naming_the_forms():
    sweep = _sweep_module()
    assert sweep.parse_point("prefill:4x512") == ("prefill", 4, 512)
    assert sweep.parse_point("decode:8@8192") == ("decode", 8, 8192)
    assert sweep.parse_point("train:2x128") == ("train", 2, 128)
    for bad in ("prefill:512", "decode:8x8192", "serve:1x2", "train"):
        with pytest.raises(ValueError) as e:
            sweep.parse_point(bad)
        assert str(e.value) == f"bad point '{bad}': prefill:BxS, decode:B@KV or train:BxS"


def test_a_tiny_sweep_runs_every_kind_of_point_and_matches_eager(tmp_path):
    out = tmp_path / "rows.jsonl"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    port = str(_free_port())  # torchrun's port 0 waits for a rendezvous
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1",
           "--master-addr", "127.0.0.1", "--master-port", port, SWEEP, "--device", "cpu",
           "--size", "small", "--dtype", "f32", "--models", "llama",
           "--points", "prefill:1x16,decode:2@8,train:2x8", "--modes", "eager,symmflow",
           "--iters", "1", "--warmup", "0", "--out", str(out)]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["point"] for r in rows] == ["prefill:1x16", "decode:2@8", "train:2x8"]
    for r in rows:
        assert r["failed"] == {}, r
        assert set(r["ms"]) == {"eager", "symmflow"}, r
        assert r["errors"]["eager"] == 0.0 and r["errors"]["symmflow"] < 1e-4, r
        assert r["partitions"]["symmflow"] >= 1, r


NODE_BISECT = os.path.join(ROOT, "tools", "device", "node_bisect.py")


@pytest.mark.parametrize("mode", [[], ["--backends"]])
def test_node_bisect_runs_on_one_cpu_process(mode):
    """tools/device/node_bisect.py (the debugging aid that found the lost StaticCache writes on
    GPUs) runs end to end on a CPU: a right model's every node and every prefix agree, and
    PyTorch's own backends give eager's logits and the written cache."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1",
           "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), NODE_BISECT,
           "--device", "cpu", *mode]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    text = run.stdout + run.stderr
    assert run.returncode == 0, text[-3000:]
    lines = [line for line in text.splitlines() if line.startswith("BISECT rank 0")]
    if mode:
        for backend in ("dynamo-only", "aot_eager", "aot+symmflow-passes"):
            row = next(line for line in lines if f" {backend}: " in line)
            error = float(row.split("logits error ")[1].split(",")[0])
            assert error < 1e-5 and "cumulative 8" in row, row
            assert "[1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]" in row, row
    else:
        assert any("every node an output: 0 of " in line for line in lines), lines
        assert any("every prefix agrees" in line for line in lines), lines
