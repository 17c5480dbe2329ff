"""Bad input to symmflow.torch's entry points: each is refused with a message that says what and
why (one process; a world of one over gloo where a world is needed)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import symmflow
import symmflow.torch as sft
from symmflow.torch import _library


def test_init_before_torch_distributed_says_how():
    package = os.path.dirname(os.path.dirname(os.path.abspath(symmflow.__file__)))
    code = ("import symmflow.torch as s\n"
            "try:\n    s.init()\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PYTHONPATH=package)).stdout
    assert out.strip() == (
        "Error symmflow.torch.init() needs torch.distributed initialised first: call "
        "torch.distributed.init_process_group() (torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and "
        "MASTER_PORT)")


def test_a_dtype_symmflow_lacks_is_named():
    with pytest.raises(symmflow.Error) as e:
        _library.dtype_name(torch.complex64)
    assert str(e.value).startswith("symmflow has no dtype for torch.complex64 (it knows ")


def test_symmetric_group_of_plain_memory_is_none(world):
    assert symmflow.symmetric_group(torch.zeros(4)) is None
    t = sft.empty((4, 2), dtype=torch.float32)
    assert symmflow.symmetric_group(t) == sft.resolve_group(
        torch.distributed.group.WORLD.group_name).name


def test_check_device_refuses_unknown_devices():
    with pytest.raises(symmflow.Error) as e:
        symmflow.check_device("tpu")
    assert str(e.value) == "--device: 'cpu' or 'cuda' (got 'tpu')"
