"""Issue 25's boundaries of the numpy API: read-only and broadcast arrays are inputs like any other
(for reading; a program that writes an input refuses a read-only one, naming it), a `.sf` text with
NUL bytes gives one error, and the timeout default is the C++ table's alone."""
from __future__ import annotations

import numpy as np
import pytest
import symmflow

ALLREDUCE = """group tp
graph ar(x: f32[8, 16], w: f32[16, 12]) {
  h = aten::mm(x, w)
  r = symm_mem::one_shot_all_reduce(h, "sum", "tp")
  return r
}
"""

# The input x is written in place (an in-place add of w), so the caller's array is written back.
WRITES_INPUT = """graph g(x: f32[4], w: f32[4]) {
  aten::add_.Tensor(x, w)
  y = aten::mul.Scalar(w, 2.0)
  return y
}
"""


def _inputs(world):
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((8, 16), dtype=np.float32) for _ in range(world)]
    ws = [rng.standard_normal((16, 12), dtype=np.float32) for _ in range(world)]
    want = sum(xs[r].astype(np.float64) @ ws[r].astype(np.float64) for r in range(world))
    return xs, ws, want


def test_read_only_and_broadcast_inputs_are_read():
    c = symmflow.compile(ALLREDUCE, world_size=2)
    xs, ws, want = _inputs(2)
    for a in xs + ws:
        a.flags.writeable = False
    outs = symmflow.run(c, [[xs[r], ws[r]] for r in range(2)])
    for r in range(2):
        np.testing.assert_allclose(outs[r][0], want, rtol=1e-4, atol=1e-4)
    # A broadcast array: read-only, stride 0 along the broadcast dimension.
    row = np.arange(16, dtype=np.float32) / 16
    x = np.broadcast_to(row, (8, 16))
    assert not x.flags.writeable and x.strides[0] == 0
    w = np.ones((16, 12), np.float32)
    outs = symmflow.run(c, [[x, w], [x, w]])
    np.testing.assert_allclose(outs[0][0], 2 * (np.ascontiguousarray(x) @ w), rtol=1e-5)
    (y,) = symmflow.Program("graph g(a: f32[8, 16]) {\n  b = aten::relu(a)\n  return b\n}\n"
                            ).interpret([x])
    np.testing.assert_array_equal(y, np.ascontiguousarray(x))


def test_a_read_only_input_the_program_writes_is_refused():
    c = symmflow.compile(WRITES_INPUT, world_size=1)
    x = np.zeros(4, np.float32)
    x.flags.writeable = False
    w = np.ones(4, np.float32)
    with pytest.raises(symmflow.InvalidUsage) as info:
        symmflow.run(c, [[x, w]])
    assert str(info.value) == (
        "inputs_per_rank[0][0]: the array is read-only but program 'g' writes input 'x' in "
        "place; pass a writable array (a copy)")
    x = np.zeros(4, np.float32)
    symmflow.run(c, [[x, w]])
    np.testing.assert_array_equal(x, w)  # written back into the caller's array


def test_nul_bytes_in_a_program_are_one_error():
    text = "graph g(x: f32[4]) {\n  y = aten::relu(x)\x00\x00\x00\x00\n  return y\n}\n"
    with pytest.raises(symmflow.ProgramError) as info:
        symmflow.Program(text, filename="nul.sf")
    assert len(info.value.diagnostics) == 1, info.value.diagnostics
    assert info.value.diagnostics[0][:3] == ("nul.sf", 2, 20)
    assert "NUL" in info.value.diagnostics[0][3]


def test_the_timeout_default_is_the_cpp_tables():
    table = symmflow.tunables()
    assert table["timeout_s"]["env"] == "SYMMFLOW_TIMEOUT_S"
    assert table["timeout_s"]["default"] == "30"
    assert set(table["timeout_s"]) == {"env", "value", "default", "doc", "set"}
    assert "collective_agreement" in table and table["collective_agreement"]["default"] == "1"
