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


def test_exit_after_the_store_is_gone_is_prompt(tmp_path):
    """Note [leaving through a dead store]: a process whose FileStore directory was deleted after
    destroy_process_group leaves symmflow's world at exit within seconds (it lingered for c10d's
    300 s store timeout before)."""
    import subprocess
    import sys
    import time

    script = f"""
import os, shutil, torch, torch.distributed as dist
import symmflow.torch as sft
folder = {str(tmp_path / "store")!r}
os.makedirs(folder)
dist.init_process_group("gloo", store=dist.FileStore(os.path.join(folder, "s"), 1), rank=0,
                        world_size=1)
sft.init()
dist.destroy_process_group()
shutil.rmtree(folder)
print("done", flush=True)
"""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    took = time.monotonic() - start
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr[-3000:]
    assert took < 30, f"exit took {took:.1f} s"
