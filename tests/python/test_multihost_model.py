"""The model of symmflow on several hosts (tools/multihost_model.py, docs/multihost_model.md):
its fits recover what they are given, its formulas are the ones the doc states, and its output
covers every host count asked for."""
from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "tools", "multihost_model.py")


def _module():
    spec = importlib.util.spec_from_file_location("multihost_model", SCRIPT)
    m = importlib.util.module_from_spec(spec)
    sys.modules["multihost_model"] = m
    spec.loader.exec_module(m)
    return m


def test_fit_recovers_alpha_and_bandwidth():
    m = _module()
    alpha, bus, n = 12e-6, 300e9, 4
    k = 2 * (n - 1) / n
    points = {s: (alpha + k * s / bus) / m.US for s in (1 << 20, 256 << 20)}
    a, b = m.fit(points, n)
    assert math.isclose(a, alpha, rel_tol=1e-9) and math.isclose(b, bus, rel_tol=1e-9)


def test_formulas_are_the_documented_ones():
    m = _module()
    model = m.Model(8, 400, 0.96, 370, 30)
    s = 64 << 20
    # symmflow inside a host: alpha + 2(G-1)/G * S / B; half of it for a reduce-scatter.
    assert math.isclose(model.sf_all_reduce(s), 30e-6 + 2 * 7 / 8 * s / 370e9, rel_tol=1e-12)
    fixed, bw = model.sf_half(s)
    assert math.isclose(fixed, 15e-6) and math.isclose(bw, 7 / 8 * s / 370e9, rel_tol=1e-12)
    # The NIC: 400 Gb/s at 0.96 = 48 GB/s a GPU.
    assert math.isclose(model.nic, 48e9, rel_tol=1e-12)
    # The hierarchical plan in series is its three parts added.
    h = model.hierarchical(s, 4)
    assert math.isclose(h["serial_s"], 2 * (fixed + bw) + h["inter_s"], rel_tol=1e-12)
    assert h["pipelined_s"] <= h["serial_s"]
    assert 7.9e9 < m.llama_params() < 8.1e9  # the Llama-8B shape


def test_json_covers_every_host_count():
    out = subprocess.run([sys.executable, SCRIPT, "--hosts", "2,4", "--json"], check=True,
                         capture_output=True, text=True).stdout
    data = json.loads(out)
    assert sorted({r["hosts"] for r in data["all_reduce"]}) == [2, 4]
    for r in data["all_reduce"]:
        assert r["serial_s"] > 0 and r["nccl_s"] > 0
