"""Shared fixtures of the Python package's tests.

The package under test is the build tree's (SYMMFLOW_PYTHON_PATH, which ctest sets to
build/<preset>/python), else build/dev/python of this checkout, else an installed one. Every test
skips when symmflow cannot be imported (a build without SYMMFLOW_PYTHON).
"""
from __future__ import annotations

import os
import pathlib
import sys
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
_path = os.environ.get("SYMMFLOW_PYTHON_PATH") or str(ROOT / "build" / "dev" / "python")
if os.path.isdir(_path) and _path not in sys.path:
    sys.path.insert(0, _path)

EXAMPLES = pathlib.Path(os.environ.get("SYMMFLOW_EXAMPLES_DIR", ROOT / "examples"))

try:
    import symmflow  # noqa: F401
except ImportError as e:  # pragma: no cover - only without the module
    pytest.skip(f"symmflow is not importable ({e})", allow_module_level=True)


class DictStore:
    """An in-process key-value store with init_store's callback semantics (for world 1)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.cv = threading.Condition()

    def set(self, key: str, value: bytes) -> None:
        with self.cv:
            self.data[key] = bytes(value)
            self.cv.notify_all()

    def wait(self, keys: list, timeout_s: float) -> bool:
        with self.cv:
            return self.cv.wait_for(lambda: all(k in self.data for k in keys), timeout_s)

    def get(self, key: str, timeout_s: float):
        return self.data[key] if self.wait([key], timeout_s) else None

    def add(self, key: str, delta: int) -> int:
        with self.cv:
            value = int(self.data.get(key, b"0")) + delta
            self.data[key] = str(value).encode()
            self.cv.notify_all()
            return value


@pytest.fixture(scope="session")
def rank1():
    """This pytest process as rank 0 of a world of 1 (one store world per process)."""
    store = DictStore()
    return symmflow.init_store(set=store.set, get=store.get, wait=store.wait, add=store.add,
                               rank=0, world_size=1, prefix="pytest", timeout_s=20)
