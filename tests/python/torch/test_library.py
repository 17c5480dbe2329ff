"""torch.ops.symmflow asks the C++ registry (issue 24, item 1): for every symm_mem op of the
catalogue, the fake kernel's results equal the op's C++ shape function on the same arguments,
and the arguments registered with torch as symmetric are the catalogue's."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import symmflow
import symmflow.torch  # noqa: F401 - registers torch.ops.symmflow
from symmflow import _core
from symmflow.torch import _library

SYMM_OPS = [o for o in symmflow.ops() if o["name"].startswith("symm_mem::")
            and "." not in o["name"].split("::")[1]]


def _example_args(schema: torch.FunctionSchema, group: str):
    """Arguments a shape function accepts for most ops: [8, 6] f32 tensors (B and Bs: [6, N]), the group, "sum",
    small ints (peer 0, channel 0, root 0, shift 1), False, 1e-5 for floats; u32 where the op
    writes flags."""
    args = []
    for a in schema.arguments:
        t = str(a.type)
        if a.name == "group_name":
            args.append(group)
        elif a.name == "reduce_op":
            args.append("sum")
        elif a.name == "Bs":  # the collective matmuls: [8, 6] @ [6, N]
            args.append([torch.zeros(6, 8), torch.zeros(6, 3)])
        elif a.name in ("B", "partials"):  # partials: one [8, 8] slot per rank (a world of 1)
            args.append(torch.zeros([6, 8] if a.name == "B" else [1, 8, 8]))
        elif t.startswith("Tensor"):
            dtype = torch.uint32 if "value32" in schema.name or "memset32" in schema.name \
                else torch.float32
            shape = [6] if a.name in ("weight",) else [8, 6]
            if a.name in ("in_splits", "out_splits_offsets"):
                shape, dtype = [2 if a.name == "in_splits" else 4], torch.int64
            args.append(torch.zeros(shape, dtype=dtype))
        elif t == "int":
            args.append(1 if a.name == "shift" else 0)
        elif t == "float":
            args.append(1e-5)
        elif t == "bool":
            args.append(False)
        elif a.has_default_value():
            args.append(a.default_value)
        else:
            pytest.skip(f"no example for {schema.name} argument {a.name}: {t}")
    return args


@pytest.mark.parametrize("entry", SYMM_OPS, ids=lambda o: o["name"])
def test_fake_kernel_equals_the_cpp_shape_function(world, entry):
    op_name = entry["name"].split("::")[1]
    if op_name in _library.SKIPPED or entry["name"] in _library.SKIPPED:
        pytest.skip(f"torch refused the schema: {_library.SKIPPED.get(entry['name'])}")
    overload = getattr(torch.ops.symmflow, op_name).default
    args = _example_args(overload._schema, world)
    metas = [_library._meta(a) for a in args]
    try:
        want = _core.infer_shapes(entry["name"], metas, {}, {world: 1})
    except symmflow.Error as e:
        pytest.skip(f"the example arguments do not fit {entry['name']}: {e}")
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fakes = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        got = overload(*fakes)
    got = [] if got is None else [got] if isinstance(got, torch.Tensor) else list(got)
    assert [(_library.dtype_name(t.dtype), list(t.shape)) for t in got] == \
        [(d, list(s)) for d, s in want], entry["name"]


def test_every_op_is_checked_against_its_shape_function(world):
    """The walk above covers the catalogue: an op whose example arguments do not fit is a
    failure of this list, not a silent skip."""
    for entry in SYMM_OPS:
        overload = getattr(torch.ops.symmflow, entry["name"].split("::")[1]).default
        metas = [_library._meta(a) for a in _example_args(overload._schema, world)]
        _core.infer_shapes(entry["name"], metas, {}, {world: 1})


def test_symmetric_arguments_registered_with_torch_are_the_catalogues():
    for entry in SYMM_OPS:
        op_name = entry["name"].split("::")[1]
        assert _library.SYMM_ARGS[op_name] == list(entry["symm_args"]), entry["name"]
    # The ops the issue found disagreeing with the old guess by argument names.
    for op, want in {"collective_permute": [], "collective_permute_out": ["out"],
                     "put_signal": ["dst"], "memset32_": [], "stream_write_value32_": []}.items():
        assert _library.SYMM_ARGS[op] == want, op


# Issue 25: every op of the catalogue is callable eagerly (barrier, which has no tensor argument,
# raised NotImplementedError: torch's dispatcher had no key to pick a kernel by). Arguments as
# above, shaped for the kernels of a world of one where the shape functions were lenient.
_EAGER_ARGS = {
    "all_to_all_vdev": lambda g: [torch.zeros(8, 6), torch.zeros(8, 6),
                                  torch.tensor([8], dtype=torch.int64),
                                  torch.zeros(2, 1, dtype=torch.int64), g],
}


@pytest.mark.parametrize("entry", SYMM_OPS, ids=lambda o: o["name"])
def test_every_op_is_callable_eagerly(world, entry):
    op_name = entry["name"].split("::")[1]
    overload = getattr(torch.ops.symmflow, op_name).default
    args = _EAGER_ARGS[op_name](world) if op_name in _EAGER_ARGS else \
        _example_args(overload._schema, world)
    if op_name == "wait_signal":  # consumes the signal a put_signal to this rank raised
        torch.ops.symmflow.put_signal(torch.zeros(8, 6), args[0], 0, 0, world)
    try:
        overload(*args)
    except symmflow.Error as e:  # the kernel ran and refused: no NVLink multicast on the CPU
        assert op_name.startswith("multimem_") and "needs NVLink multicast" in str(e), str(e)
    if op_name == "put_signal":  # leaves the flag as it found it
        torch.ops.symmflow.wait_signal(args[1], 0, 0, world)
