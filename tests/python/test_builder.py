"""symmflow._core.ProgramBuilder and infer_shapes (api/builder.hpp): programs built node by node
through the C++ registry, as the torch bridge's importer builds them (Note [program builder])."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import symmflow
from symmflow import _core


def test_a_built_program_prints_parses_and_runs():
    b = _core.ProgramBuilder("g", 1)
    x = b.add_input("x", "f32", [2, 3])
    graph = b.add_input("graph", "f32", [3, 3])  # a word of the text format: renamed
    h, = b.add_op("aten::mm", [x, graph], {}, "h")
    m, = b.add_op("aten::add.Scalar", [h, 1.5], {}, "rank")
    pieces = b.add_op("aten::split_with_sizes", [m, [1, 2], 1], {}, "piece")
    assert len(pieces) == 2
    assert [b.type(p)[1:] for p in pieces] == [("f32", [2, 1]), ("f32", [2, 2])]
    b.set_outputs([pieces[1]])
    program = b.finish("<test>")
    assert program.text == (
        "graph g(x: f32[2, 3], graph_: f32[3, 3]) {\n"
        "  h = aten::mm(x, graph_)\n"
        "  rank_ = aten::add.Scalar(h, 1.5)\n"
        "  piece_0, piece_1 = aten::split_with_sizes(rank_, [1, 2], 1)\n"
        "  return piece_1\n"
        "}\n")
    import numpy as np
    xs, ws = np.arange(6, dtype=np.float32).reshape(2, 3), np.eye(3, dtype=np.float32)
    out, = program.interpret([xs, ws])
    np.testing.assert_array_equal(out, (xs + 1.5)[:, 1:])


def test_non_finite_literals_round_trip():
    b = _core.ProgramBuilder("nf", 1)
    x = b.add_input("x", "f32", [4])
    y, = b.add_op("aten::mul.Scalar", [x, float("-inf")], {}, "y")
    z, = b.add_op("aten::add.Scalar", [y, float("nan")], {}, "z")
    b.set_outputs([z])
    text = b.finish().text
    assert "aten::mul.Scalar(x, -inf)" in text and "aten::add.Scalar(y, nan)" in text
    assert symmflow.Program(text).text == text


def test_the_registry_refuses_a_call_naming_the_op():
    b = _core.ProgramBuilder("bad", 1)
    x = b.add_input("x", "f32", [4, 8])
    with pytest.raises(symmflow.Error) as e:
        b.add_op("aten::mm", [x, x], {})
    assert "aten::mm: self has shape [4, 8] and mat2 has shape [4, 8]" in str(e.value)
    with pytest.raises(symmflow.Error) as e:
        b.add_op("aten::no_such_op", [x], {})
    assert "unknown op 'aten::no_such_op'" in str(e.value)
    with pytest.raises(symmflow.Error) as e:
        _core.ProgramBuilder("g", 1, "tpu")
    assert "device 'tpu' is not 'cpu', 'cuda' or 'cuda:<i>'" in str(e.value)
    # A refused call leaves the graph as it was.
    y, = b.add_op("aten::sin", [x], {}, "y")
    b.set_outputs([y])
    assert b.finish().text.count(" = ") == 1


def test_infer_shapes_is_the_shape_function():
    meta = _core.Meta("bf16", [3, 5])
    assert _core.infer_shapes("symm_mem::_low_contention_all_gather", [meta, "tp"], {},
                              {"tp": 4}) == [("bf16", [12, 5])]
    assert _core.infer_shapes("aten::native_layer_norm", [meta, [5], None, None, 1e-5]) == \
        [("bf16", [3, 5]), ("f32", [3, 1]), ("f32", [3, 1])]
    with pytest.raises(symmflow.Error) as e:
        _core.infer_shapes("symm_mem::_low_contention_all_gather", [meta, "tp"], {}, {})
    assert "unknown group 'tp'" in str(e.value)


def test_a_builder_for_cuda_asks_the_kernels():
    """Note [kernel checks]: with a device, a call its kernel would refuse is refused when built.
    In a fresh process: compiling for cuda loads the cuda backend's kernels (no GPU needed)."""
    code = (
        "import symmflow\n"
        "from symmflow import _core as c\n"
        "try:\n"
        "    symmflow.compile('graph g(x: f32[2]) {\\n  return x\\n}\\n', device='cuda')\n"
        "except symmflow.Error as e:\n"
        "    print('no cuda module:', e); raise SystemExit(0)\n"
        "b = c.ProgramBuilder('g', 1, 'cuda')\n"
        "i, f = b.add_input('i', 'i64', [2, 2]), b.add_input('f', 'f32', [2, 2])\n"
        "print(len(b.add_op('aten::add.Tensor', [i, i], {})), len(b.add_op('aten::mm', [f, f], {})))\n"
        "try:\n"
        "    b.add_op('aten::mm', [i, i], {})\n"
        "except symmflow.Error as e:\n"
        "    print(e)\n"
        "cpu = c.ProgramBuilder('g', 1, 'cpu')\n"
        "j = cpu.add_input('j', 'i64', [2, 2])\n"
        "print(len(cpu.add_op('aten::mm', [j, j], {})))\n"
        "b.add_group('tp', [])\n"
        "try:\n"
        "    b.add_op('symm_mem::one_shot_all_reduce', [i, 'sum', 'tp'], {})\n"
        "except symmflow.Error as e:\n"
        "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ)).stdout.splitlines()
    if out and out[0].startswith("no cuda module:"):
        pytest.skip("built without the cuda backend")
    assert out == ["1 1", "aten::mm: dtype i64 has no cuda kernel (f32, bf16, f16, f64)", "1",
                   "symm_mem::one_shot_all_reduce: dtype i64 has no cuda reduction (f32, bf16, "
                   "f16)"], out


def test_reductions_take_the_registrys_reduce_ops_and_their_kernels_dtypes():
    """Note [reduce ops]: binding refuses a reduce op outside the catalogue's, on every device;
    Note [reduction dtypes]: a builder for a device refuses a reduction its kernels cannot do,
    while byte-moving collectives take any dtype."""
    b = _core.ProgramBuilder("r", 2)
    b.add_group("tp", [])
    x = b.add_input("x", "f32", [4, 8])
    with pytest.raises(symmflow.Error) as e:
        b.add_op("symm_mem::one_shot_all_reduce", [x, "prod", "tp"], {})
    assert "symm_mem::one_shot_all_reduce: unknown reduce_op 'prod' (valid: sum, avg, max, min)" \
        in str(e.value)
    cpu = _core.ProgramBuilder("r", 2, "cpu")
    cpu.add_group("tp", [])
    i8, i32 = cpu.add_input("a", "i8", [4, 8]), cpu.add_input("b", "i32", [4, 8])
    with pytest.raises(symmflow.Error) as e:
        cpu.add_op("symm_mem::one_shot_all_reduce", [i8, "sum", "tp"], {})
    assert str(e.value).endswith("symm_mem::one_shot_all_reduce: dtype i8 has no cpu reduction "
                                 "(f32, bf16, f16, f64, i32, i64)"), str(e.value)
    assert len(cpu.add_op("symm_mem::one_shot_all_reduce", [i32, "max", "tp"], {})) == 1
    assert len(cpu.add_op("symm_mem::_low_contention_all_gather", [i8, "tp"], {})) == 1


def test_a_writeback_is_printed_and_refused_for_anything_but_an_input():
    """add_writeback (Note [the KV cache in place]): `writeback cache = new` in the text; a value
    that is no input, or a value of another type, is refused by name."""
    b = _core.ProgramBuilder("w", 1)
    cache = b.add_input("cache", "f32", [4, 2])
    pos = b.add_input("pos", "i64", [1])
    k = b.add_input("k", "f32", [1, 2])
    new, = b.add_functional("aten::index_put_", [cache, [pos], k], {}, "new")
    y, = b.add_op("aten::mul.Scalar", [new, 2.0], {}, "y")
    with pytest.raises(symmflow.InvalidUsage, match="add_writeback: 'y' is not an input of "
                       "program 'w'"):
        b.add_writeback(y, new)
    with pytest.raises(symmflow.Error, match=r"writeback k = new_self: types f32\[1, 2\] and "
                       r"f32\[4, 2\] differ"):
        b.add_writeback(k, new)
    b.add_writeback(cache, new)
    b.set_outputs([y])
    text = b.finish("<test>").text
    assert "  new_self = functional<aten::index_put_>(cache, [pos], k)\n" in text, text
    assert "  writeback cache = new_self\n" in text, text
