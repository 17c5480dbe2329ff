"""Sessions and DLPack: zero-copy inputs and outputs (numpy and torch, bf16), strided inputs,
symmetric tensors and eager ops, on this process as a world of one rank (conftest.rank1)."""
from __future__ import annotations

import numpy as np
import pytest
import symmflow
from conftest import EXAMPLES

torch = pytest.importorskip("torch")


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def staged_session(rank1):
    text = (EXAMPLES / "input_allreduce.sf").read_text()
    return symmflow.Session(symmflow.compile(text, world_size=1), rank1)


def test_session_specs_and_rank(rank1):
    assert (rank1.rank, rank1.world_size, rank1.transport) == (0, 1, "store")
    s = staged_session(rank1)
    assert s.inputs == [symmflow.TensorSpec("x", "f32", (32, 64))]
    assert s.outputs == [symmflow.TensorSpec("r", "f32", (32, 64))]
    assert rank1.allgather(b"abc", "test") == [b"abc"]
    rank1.barrier("test")


def test_input_buffer_roundtrip_is_zero_copy(rank1):
    s = staged_session(rank1)
    buf = s.input_buffer(0)
    view = np.from_dlpack(buf)
    assert view.shape == (32, 64) and view.dtype == np.float32
    assert address(np.from_dlpack(s.input_buffer(0))) == address(view)  # the same staging bytes
    x = np.arange(32 * 64, dtype=np.float32).reshape(32, 64)
    view[...] = x
    (out,) = s.run([buf])
    assert s.last_stats == {"copies": 0, "bytes_copied": 0, "input_copies_skipped": 1,
                            "output_copies": 1, "output_bytes": 32 * 64 * 4, "outputs_bound": 0}
    np.testing.assert_array_equal(np.from_dlpack(out), x)
    (out,) = s.run([x])  # caller memory: the plan copies it into symmetric memory
    assert s.last_stats["copies"] == 1 and s.last_stats["input_copies_skipped"] == 0
    np.testing.assert_array_equal(np.from_dlpack(out), x)


def test_output_is_shared_with_torch_and_numpy(rank1):
    s = staged_session(rank1)
    x = np.random.default_rng(1).standard_normal((32, 64), dtype=np.float32)
    (out,) = s.run([x])
    t = torch.from_dlpack(out)
    n = np.from_dlpack(out)
    assert t.data_ptr() == address(n)  # one allocation, two views
    t[0, 0] = 42.0
    assert n[0, 0] == 42.0
    np.testing.assert_array_equal(n[1:], x[1:])


def test_run_into_writes_caller_arrays(rank1):
    s = staged_session(rank1)
    x = np.random.default_rng(2).standard_normal((32, 64), dtype=np.float32)
    out = np.zeros((32, 64), np.float32)
    stats = s.run_into([x], [out])
    # The output is written into `out` itself (Note [outputs bound in place]).
    assert stats["output_copies"] == 0 and stats["outputs_bound"] == 1 and stats["copies"] == 1
    np.testing.assert_array_equal(out, x)
    buf = s.input_buffer(0)
    np.from_dlpack(buf)[...] = 2 * x
    stats = s.run_into([buf], [out])
    assert stats["copies"] == 0 and stats["input_copies_skipped"] == 1
    np.testing.assert_array_equal(out, 2 * x)
    with pytest.raises(symmflow.InvalidUsage) as info:
        s.run_into([x], [np.zeros((8,), np.float32)])
    assert str(info.value) == ("run: output 0 ('r') of program 'input_allreduce' is f32[32, 64], "
                               "got f32[8]")


def test_torch_bf16_in_and_out(rank1):
    text = """group tp
graph bf(x: bf16[4, 8], y: bf16[4, 8]) {
  s = aten::add(x, y)
  r = symm_mem::one_shot_all_reduce(s, "sum", "tp")
  return r
}
"""
    s = symmflow.Session(symmflow.compile(text, world_size=1), rank1)
    x = torch.randn(4, 8).to(torch.bfloat16)
    y = torch.randn(4, 8).to(torch.bfloat16)
    (out,) = s.run([x, y])
    t = torch.from_dlpack(out)
    assert t.dtype == torch.bfloat16 and t.shape == (4, 8)
    assert torch.equal(t, x + y)  # one bf16 rounding of the f32 sum, as torch does
    # a torch tensor as the staging buffer: zero copies
    buf = torch.from_dlpack(symmflow.Session(symmflow.compile(
        (EXAMPLES / "input_allreduce.sf").read_text(), world_size=1), rank1).input_buffer(0))
    assert buf.dtype == torch.float32 and buf.shape == (32, 64)


def test_torch_staging_buffer_is_zero_copy(rank1):
    s = staged_session(rank1)
    buf = torch.from_dlpack(s.input_buffer(0))
    buf.copy_(torch.arange(32 * 64, dtype=torch.float32).reshape(32, 64))
    (out,) = s.run([buf])
    assert s.last_stats["input_copies_skipped"] == 1 and s.last_stats["copies"] == 0
    assert torch.equal(torch.from_dlpack(out), buf)


def test_strided_inputs_are_handled(rank1):
    text = "graph g(a: f32[3, 4], b: f32[4, 5]) {\n  c = aten::mm(a, b)\n  return c\n}\n"
    s = symmflow.Session(symmflow.compile(text), rank1)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 3), dtype=np.float32).T  # strides (1, 3): not contiguous
    b = rng.standard_normal((8, 5), dtype=np.float32)[::2]  # every other row
    assert not a.flags.c_contiguous and not b.flags.c_contiguous
    (c,) = s.run([a, b])
    np.testing.assert_allclose(np.from_dlpack(c), a @ b, rtol=1e-5, atol=1e-5)
    (c,) = s.run([torch.from_numpy(a.T.copy()).t(), torch.from_numpy(b.copy())])
    np.testing.assert_allclose(np.from_dlpack(c), a @ b, rtol=1e-5, atol=1e-5)


def test_negative_strides_are_refused(rank1):
    text = "graph g(a: f32[3, 4], b: f32[4, 5]) {\n  c = aten::mm(a, b)\n  return c\n}\n"
    s = symmflow.Session(symmflow.compile(text), rank1)
    a = np.zeros((3, 4), np.float32)
    b = np.zeros((4, 5), np.float32)[::-1]
    with pytest.raises(symmflow.InvalidUsage) as info:
        s.run([a, b])
    assert str(info.value) == ("inputs[1]: negative strides are not supported (dimension 0 "
                               "has stride -5); pass a contiguous copy")


def test_empty_symmetric_and_call_op_world_1(rank1):
    t = symmflow.empty_symmetric(rank1, [4, 6], dtype="f32")
    n = np.from_dlpack(t)
    assert n.shape == (4, 6) and not n.any()
    n[...] = np.arange(24, dtype=np.float32).reshape(4, 6)
    (r,) = symmflow.call_op(rank1, "symm_mem::one_shot_all_reduce", t, "sum", "world")
    np.testing.assert_array_equal(np.from_dlpack(r), n)
    with pytest.raises(symmflow.InvalidUsage) as info:
        symmflow.call_op(rank1, "symm_mem::one_shot_all_reduce", np.zeros((4, 6), np.float32),
                         "sum", "world")
    assert str(info.value) == (
        "symm_mem::one_shot_all_reduce: argument 'input' is not in symmetric memory; allocate it "
        "with symmflow::empty_symmetric(shape, dtype, \"world\") or let the compiler place it")
    # a view of the symmetric allocation is still symmetric
    (r,) = symmflow.call_op(rank1, "symm_mem::one_shot_all_reduce", n[2:], "sum", "world")
    np.testing.assert_array_equal(np.from_dlpack(r), n[2:])
    with pytest.raises(symmflow.InvalidUsage) as info:
        symmflow.empty_symmetric(rank1, [4], dtype="f33")
    assert str(info.value) == "empty_symmetric: unknown dtype 'f33'"
    # Note [checked sizes]: a byte count that would wrap is refused, naming the shape (it once
    # allocated 4 bytes for 2^62 + 1 floats, and an all-reduce on it crashed).
    with pytest.raises(symmflow.InvalidUsage) as info:
        symmflow.empty_symmetric(rank1, [2**62 + 1], dtype="f32")
    assert str(info.value) == ("empty_symmetric: [4611686018427387905] of f32 is more than 2^62 "
                               "bytes (its size overflows)")
    with pytest.raises(symmflow.InvalidUsage) as info:
        symmflow.empty_symmetric(rank1, [2**40, 2**40], dtype="bf16")
    assert "[1099511627776, 1099511627776] of bf16 is more than 2^62 bytes" in str(info.value)
    with pytest.raises(symmflow.InvalidUsage) as info:
        symmflow.empty_symmetric(rank1, [3, -2], dtype="f32")
    assert str(info.value) == "empty_symmetric: negative dimension in [3, -2]"


def test_symmetric_input_is_bound_in_place(rank1):
    """An input already in symmetric memory of the staging buffer's group costs no copy-in; one in
    another group is copied, and the stats say which (Note [symmetric inputs bound in place] in
    src/exec/executable.cpp)."""
    s = staged_session(rank1)  # its plan stages x in symm[tp]
    x = np.random.default_rng(4).standard_normal((32, 64), dtype=np.float32)
    other = symmflow.empty_symmetric(rank1, [32, 64], dtype="f32", group="world")
    np.from_dlpack(other)[...] = x
    (out,) = s.run([other])
    assert s.last_stats == {"copies": 1, "bytes_copied": 32 * 64 * 4, "input_copies_skipped": 0,
                            "output_copies": 1, "output_bytes": 32 * 64 * 4, "outputs_bound": 0}
    np.testing.assert_array_equal(np.from_dlpack(out), x)
    assert rank1.has_group("tp")  # made by the session
    t = symmflow.empty_symmetric(rank1, [32, 64], dtype="f32", group="tp")
    np.from_dlpack(t)[...] = 3 * x
    (out,) = s.run([t])
    assert s.last_stats == {"copies": 0, "bytes_copied": 0, "input_copies_skipped": 1,
                            "output_copies": 1, "output_bytes": 32 * 64 * 4, "outputs_bound": 0}
    np.testing.assert_array_equal(np.from_dlpack(out), 3 * x)


def test_output_views_are_the_plans_memory(rank1):
    s = staged_session(rank1)
    x = np.random.default_rng(5).standard_normal((32, 64), dtype=np.float32)
    (first,) = s.run([x], views=True)
    assert s.last_stats["output_copies"] == 0
    first_np = np.from_dlpack(first)
    np.testing.assert_array_equal(first_np, x)
    (second,) = s.run([2 * x], views=True)
    assert address(np.from_dlpack(second)) == address(first_np)  # the same planned buffer
    np.testing.assert_array_equal(first_np, 2 * x)


def test_new_group_and_eager_op_in_it(rank1):
    if not rank1.has_group("solo"):
        rank1.new_group("solo", [0])
    assert rank1.has_group("solo") and rank1.has_group("world") and not rank1.has_group("nope")
    t = symmflow.empty_symmetric(rank1, [5], dtype="f32", group="solo")
    np.from_dlpack(t)[...] = np.arange(5, dtype=np.float32)
    (r,) = symmflow.call_op(rank1, "symm_mem::one_shot_all_reduce", t, "sum", "solo")
    np.testing.assert_array_equal(np.from_dlpack(r), np.arange(5, dtype=np.float32))
    with pytest.raises(symmflow.InvalidUsage) as info:
        symmflow.empty_symmetric(rank1, [5], group="nope")
    assert str(info.value).startswith("unknown group 'nope' (known: ")
