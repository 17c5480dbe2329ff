"""The IR text side of the graph importer: dtypes, tensor types, literals and value names as
symmflow's text format writes them (docs/ir.md), c10d groups as `group` declarations, and the
error the importer raises.

What it does: renders Python values and tensors as IR text; turns c10d group names into IR
groups through a resolver (Note [group names]).
Expects: static shapes; resolver results as lists of global ranks.
Guarantees: text the IR parser reads back as the same values; deterministic group names.
Refuses: with `UnsupportedGraph`: dtypes symmflow lacks, symbolic sizes, non-finite floats,
values without an IR form, groups that are empty, overlap, differ in size or leave this rank out.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import torch

DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int8: "i8", torch.int32: "i32", torch.int64: "i64", torch.uint32: "u32",
    torch.bool: "bool",
}

# Words the IR parser reads as something other than a value name.
_RESERVED_NAMES = {"True", "False", "None", "rank", "graph", "group", "return", "writeback",
                   "fused", "functional", "copy", "world"}

class UnsupportedGraph(Exception):
    """A graph, or one node of it, that symmflow cannot import. `node` and `op` name the cause."""

    def __init__(self, message: str, node: Optional[str] = None, op: Optional[str] = None):
        super().__init__(message)
        self.node = node
        self.op = op


GroupResolver = Callable[[str], Sequence[Any]]


def ir_dtype(dtype: torch.dtype, where: str) -> str:
    name = DTYPE_NAMES.get(dtype)
    if name is None:
        raise UnsupportedGraph(f"{where}: dtype {dtype} is not one of symmflow's dtypes "
                               f"({', '.join(sorted(DTYPE_NAMES.values()))})")
    return name


def tensor_type(t: Any, where: str) -> str:
    """`f32[16, 64]` for a tensor (real or fake); refuses symbolic sizes."""
    if not isinstance(t, torch.Tensor):
        raise UnsupportedGraph(f"{where}: is {type(t).__name__}, not a tensor")
    dims = []
    for s in t.shape:
        if not isinstance(s, int):
            raise UnsupportedGraph(f"{where}: has a symbolic size {s} (dynamic shapes are not "
                                   "supported)")
        dims.append(str(s))
    return f"{ir_dtype(t.dtype, where)}[{', '.join(dims)}]"


def render_literal(v: Any, where: str) -> str:
    """A Python argument as the IR writes it (ints, floats, strings, bools, None, dtypes, lists)."""
    if v is None:
        return "None"
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise UnsupportedGraph(f"{where}: the float {v} has no IR literal")
        text = repr(v)
        return text if any(c in text for c in ".e") else text + ".0"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, torch.dtype):
        return ir_dtype(v, where)
    raise UnsupportedGraph(f"{where}: argument {v!r} of type {type(v).__name__} has no IR form")


def safe_name(name: str) -> str:
    return name + "_v" if name in _RESERVED_NAMES else name


class GroupTable:
    """c10d group names -> IR group declarations (Note [group names])."""

    # Note [group names]
    # Each c10d group name the graph uses becomes `g<k>` (k in order of first use). A resolver
    # result covering every rank of the world as one subgroup is `group g<k>`; any other
    # partition is written out (`group g<k> = {0, 2}, {1, 3}`). Subgroups must be disjoint, of
    # one size, hold ranks of the world, and one of them must hold this rank. A `namer` replaces
    # `g<k>` with a name derived from the subgroups: the torch backend names every split the same
    # in every partition and graph of a process, because runtime groups are made once per name
    # (exec::ensure_groups refuses a name reused for other members).

    def __init__(self, resolver: Optional[GroupResolver], world_size: int, rank: int,
                 namer: Optional[Callable[[list[list[int]]], str]] = None):
        self.resolver = resolver
        self.namer = namer
        self.world_size = world_size
        self.rank = rank
        self.names: dict[str, str] = {}
        self.sizes: dict[str, int] = {}
        self.decls: list[str] = []
        self.permissive = False

    @classmethod
    def permissive_table(cls) -> "GroupTable":
        """For support checks without a world: every group name resolves, sizes unchecked."""
        table = cls(None, 1, 0)
        table.permissive = True
        return table

    def resolve(self, c10d_name: Any, where: str) -> str:
        key = str(c10d_name)
        if key in self.names:
            return self.names[key]
        if self.permissive:  # support checks: any group, size unknown
            return key
        if self.resolver is None:
            raise UnsupportedGraph(f"{where}: names c10d group '{key}' but no group resolver "
                                   "was given")
        raw = list(self.resolver(key))
        subgroups = [list(s) for s in raw] if raw and not isinstance(raw[0], int) else [raw]
        ir_name = self.namer(subgroups) if self.namer else f"g{len(self.names)}"
        flat = [r for s in subgroups for r in s]
        if not subgroups or any(not s for s in subgroups):
            raise UnsupportedGraph(f"{where}: c10d group '{key}' resolves to an empty group")
        if any(not (0 <= r < self.world_size) for r in flat) or len(set(flat)) != len(flat):
            raise UnsupportedGraph(f"{where}: c10d group '{key}' resolves to {subgroups}, which "
                                   f"are not distinct ranks of the world of {self.world_size}")
        if len({len(s) for s in subgroups}) != 1:
            raise UnsupportedGraph(f"{where}: c10d group '{key}' resolves to subgroups of "
                                   f"different sizes {subgroups}")
        if self.rank not in flat:
            raise UnsupportedGraph(f"{where}: c10d group '{key}' resolves to {subgroups}, which "
                                   f"leave out this rank {self.rank}")
        if len(subgroups) == 1 and sorted(flat) == list(range(self.world_size)) and \
                flat == sorted(flat):
            self.decls.append(f"group {ir_name}")
        else:
            parts = ", ".join("{" + ", ".join(str(r) for r in s) + "}" for s in subgroups)
            self.decls.append(f"group {ir_name} = {parts}")
        self.names[key] = ir_name
        self.sizes[key] = len(subgroups[0])
        return ir_name
