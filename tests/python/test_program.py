"""Programs, compile, explain and the threads world from Python, checked against numpy and the
CLI; exact error texts."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import symmflow
from conftest import EXAMPLES

ALLREDUCE = """group tp
graph ar(x: f32[8, 16], w: f32[16, 12]) {
  h = aten::mm(x, w)
  r = symm_mem::one_shot_all_reduce(h, "sum", "tp")
  return r
}
"""


def test_version_and_ops():
    assert symmflow.__version__ == "0.1.0"
    ops = {op["name"]: op for op in symmflow.ops()}
    ar = ops["symm_mem::one_shot_all_reduce"]
    assert ar["schema"].startswith("symm_mem::one_shot_all_reduce(Tensor input, str reduce_op, str group_name)")
    assert "cpu" in ar["backends"]
    assert "collective" in ar["tags"]
    assert ar["symm_args"] == ["input"]
    assert set(ops["aten::mm"]) == {"name", "schema", "backends", "tags", "symm_args", "group_arg",
                                    "inplace"}
    assert ops["aten::add.Tensor"]["inplace"] == "aten::add_.Tensor"
    assert ops["aten::mm"]["inplace"] == ""


def test_compile_and_explain_tp_mlp_small():
    text = (EXAMPLES / "tp_mlp_small.sf").read_text()
    program = symmflow.Program(text, world_size=2, filename="tp_mlp_small.sf")
    assert program.inputs[0] == symmflow.TensorSpec("x", "f32", (16, 64))
    assert [s.name for s in program.inputs] == ["x"] + [f"w{i}" for i in range(8)]
    assert program.outputs == [symmflow.TensorSpec("r7", "f32", (16, 64))]
    c = symmflow.compile(program)
    assert c.world_size == 2
    explain = c.explain()
    assert explain["program"] == "tp_mlp_small" and explain["world_size"] == 2
    assert len(explain["collectives"]) == 8
    assert explain["copies"] == []  # "no compiler-added copy" (the example's own claim)
    assert explain == json.loads(c.explain_json())
    assert "one_shot_all_reduce" in c.ir_text() and "one_shot_all_reduce" in c.plan_text()
    cli = os.environ.get("SYMMFLOW_CLI")
    if cli and os.path.exists(cli):  # the same as `symmflow explain` prints
        path = str(EXAMPLES / "tp_mlp_small.sf")
        c2 = symmflow.compile(symmflow.Program(text, world_size=2, filename=path))
        got = subprocess.run([cli, "explain", path, "--ranks", "2"], check=True,
                             capture_output=True, text=True, timeout=60).stdout
        assert c2.explain_text() == got
        got_json = subprocess.run([cli, "explain", path, "--ranks", "2", "--json"], check=True,
                                  capture_output=True, text=True, timeout=60).stdout
        assert c2.explain() == json.loads(got_json)


def test_compile_text_with_world_size():
    c = symmflow.compile(ALLREDUCE, world_size=4)
    assert c.world_size == 4
    assert c.inputs == [symmflow.TensorSpec("x", "f32", (8, 16)), symmflow.TensorSpec("w", "f32", (16, 12))]


def test_program_error_diagnostics():
    text = "graph g(x: f32[4]) {\n  y = aten::foo(x)\n  return y\n}\n"
    with pytest.raises(symmflow.ProgramError) as info:
        symmflow.Program(text, filename="bad.sf")
    e = info.value
    assert isinstance(e, symmflow.Error) and isinstance(e, symmflow.InvalidUsage)
    assert e.diagnostics == [("bad.sf", 2, 7, "unknown op 'aten::foo' (did you mean aten::cos?)")]
    assert str(e) == ("bad.sf:2:7: error: unknown op 'aten::foo' (did you mean aten::cos?)\n"
                      "    y = aten::foo(x)\n"
                      "        ^")
    with pytest.raises(symmflow.ProgramError) as info:
        symmflow.compile("graph g(x: f32[4]) {\n  return z\n}\n")
    assert info.value.diagnostics[0][:3] == ("<input>", 2, 10)


def test_interpret_world_1():
    text = "graph g(a: f32[3, 4], b: f32[4, 5]) {\n  c = aten::mm(a, b)\n  return c\n}\n"
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4), dtype=np.float32)
    b = rng.standard_normal((4, 5), dtype=np.float32)
    (c,) = symmflow.Program(text).interpret([a, b])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)
    with pytest.raises(symmflow.InvalidUsage) as info:
        symmflow.Program(ALLREDUCE, world_size=2).interpret([a, b])
    assert str(info.value) == ("Program.interpret: program 'ar' is for 2 ranks; interpret runs "
                               "one rank (use symmflow.run for a world)")


@pytest.mark.parametrize("world", [1, 2, 4])
def test_run_allreduce_threads(world):
    c = symmflow.compile(ALLREDUCE, world_size=world)
    rng = np.random.default_rng(world)
    xs = [rng.standard_normal((8, 16), dtype=np.float32) for _ in range(world)]
    ws = [rng.standard_normal((16, 12), dtype=np.float32) for _ in range(world)]
    outs = symmflow.run(c, [[xs[r], ws[r]] for r in range(world)])
    want = sum(xs[r].astype(np.float64) @ ws[r].astype(np.float64) for r in range(world))
    assert len(outs) == world
    for r in range(world):
        assert len(outs[r]) == 1
        assert isinstance(outs[r][0], np.ndarray) and outs[r][0].dtype == np.float32
        np.testing.assert_allclose(outs[r][0], want, rtol=1e-4, atol=1e-4)


def test_run_errors_name_the_input():
    c = symmflow.compile(ALLREDUCE, world_size=2)
    x = np.zeros((8, 16), np.float32)
    w = np.zeros((16, 12), np.float32)
    with pytest.raises(symmflow.InvalidUsage) as info:
        symmflow.run(c, [[x, w]])
    assert str(info.value) == "run: program 'ar' is for 2 ranks, inputs_per_rank has 1 lists"
    with pytest.raises(symmflow.Error) as info:
        symmflow.run(c, [[x, w], [x, np.zeros((16, 12), np.float64)]])
    assert str(info.value) == (
        "rank 0: run: the ranks of program 'ar' bind different inputs (rank agreement):\n"
        "  input 'w' (<input>:2): rank 0 binds f32[16, 12] strides [12, 1], rank 1 binds "
        "f64[16, 12] strides [12, 1]")
    with pytest.raises(symmflow.InvalidUsage) as info:
        symmflow.run(c, [[x, w], [x, np.zeros((16, 12), np.complex64)]])
    assert str(info.value) == ("inputs_per_rank[1][1]: DLPack dtype (code 5, 64 bits, 1 lanes) has "
                               "no symmflow dtype (f32, f16, bf16, f64, i8, i32, i64, u32, bool)")


def test_step_profile_times_every_rank_step_per_op():
    """Note [step profile]: on, each run's steps add to per-op totals (both ranks' threads);
    off, nothing is added; SYMMFLOW_STEP_PROFILE=1 prints the table when the process exits."""
    c = symmflow.compile(ALLREDUCE, world_size=2)
    rng = np.random.default_rng(5)
    inputs = [[rng.standard_normal((8, 16), dtype=np.float32),
               rng.standard_normal((16, 12), dtype=np.float32)] for _ in range(2)]
    symmflow.reset_step_profile()
    symmflow.run(c, inputs)
    assert symmflow.step_profile() == []
    symmflow._core._set_step_profile(True)
    try:
        for _ in range(3):
            symmflow.run(c, inputs)
    finally:
        symmflow._core._set_step_profile(False)
    rows = {r["step"]: r for r in symmflow.step_profile()}
    assert set(rows) >= {"aten::mm.out 768 B"}, rows
    assert any(s.startswith("symm_mem::one_shot_all_reduce") for s in rows), rows
    for r in rows.values():
        assert r["calls"] == 6 and r["total_ms"] >= 0, r  # 3 runs on each of 2 ranks
    symmflow.reset_step_profile()
    assert symmflow.step_profile() == []
    script = ("import numpy as np, symmflow\n"
              f"c = symmflow.compile({ALLREDUCE!r}, world_size=2)\n"
              "x = np.ones((8, 16), np.float32); w = np.ones((16, 12), np.float32)\n"
              "symmflow.run(c, [[x, w], [x, w]])\n")
    env = dict(os.environ, SYMMFLOW_STEP_PROFILE="1")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "symmflow step profile (SYMMFLOW_STEP_PROFILE)" in done.stderr, done.stderr
    assert "aten::mm.out 768 B" in done.stderr, done.stderr
    # Bad input: a value other than 0 or 1 names the variable; the setter takes a bool.
    env["SYMMFLOW_STEP_PROFILE"] = "yes"
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    assert "SYMMFLOW_STEP_PROFILE=yes: expected an integer in [0, 1]" in done.stderr, done.stderr
    with pytest.raises(TypeError):
        symmflow._core._set_step_profile("yes")
