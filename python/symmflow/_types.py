"""Plain data types of the symmflow package (no native code)."""
from __future__ import annotations

from typing import NamedTuple


class TensorSpec(NamedTuple):
    """A program input or output: its name, dtype ("f32", "bf16", ...) and shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]
