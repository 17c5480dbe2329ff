"""c10d groups as IR groups, tensor types and the importer's error, for the FX importer.

What it does: turns c10d group names into IR groups through a resolver (Note [group names]),
checked and declared once per graph; names a torch tensor's dtype and static shape as symmflow
has them (the one torch <-> symmflow dtype table is _library.DTYPES).
Expects: static shapes; resolver results as lists of global ranks.
Guarantees: deterministic group names.
Refuses: with `UnsupportedGraph`: dtypes symmflow lacks, symbolic sizes, groups that are empty,
overlap, differ in size or leave this rank out.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch

from symmflow.torch._library import DTYPES


class UnsupportedGraph(Exception):
    """A graph, or one node of it, that symmflow cannot import. `node` and `op` name the cause."""

    def __init__(self, message: str, node: Optional[str] = None, op: Optional[str] = None):
        super().__init__(message)
        self.node = node
        self.op = op


GroupResolver = Callable[[str], Sequence[Any]]


def ir_dtype(dtype: torch.dtype, where: str) -> str:
    name = DTYPES.get(dtype)
    if name is None:
        raise UnsupportedGraph(f"{where}: dtype {dtype} is not one of symmflow's dtypes "
                               f"({', '.join(sorted(DTYPES.values()))})")
    return name


def tensor_type(t: Any, where: str) -> tuple[str, list[int]]:
    """(dtype name, shape) of a tensor (real or fake); refuses symbolic sizes."""
    if not isinstance(t, torch.Tensor):
        raise UnsupportedGraph(f"{where}: is {type(t).__name__}, not a tensor")
    dims = []
    for s in t.shape:
        if not isinstance(s, int):
            raise UnsupportedGraph(f"{where}: has a symbolic size {s} (dynamic shapes are not "
                                   "supported)")
        dims.append(s)
    return ir_dtype(t.dtype, where), dims


class GroupTable:
    """c10d group names -> IR group declarations (Note [group names])."""

    # Note [group names]
    # Each c10d group name the graph uses becomes `g<k>` (k in order of first use). A resolver
    # result covering every rank of the world as one subgroup is `group g<k>`; any other
    # partition is written out (`group g<k> = {0, 2}, {1, 3}`). Subgroups must be disjoint, of
    # one size, hold ranks of the world, and one of them must hold this rank. A `namer` (given
    # the subgroups and the c10d name) replaces `g<k>` with a name derived from the subgroups: the
    # torch backend names every split the same in every partition and graph of a process, because
    # runtime groups are made once per name (exec::ensure_groups refuses a name reused for other
    # members), and a c10d group made after its members' group failed gets fresh ones.

    def __init__(self, resolver: Optional[GroupResolver], world_size: int, rank: int,
                 namer: Optional[Callable[[list[list[int]], str], str]] = None):
        self.resolver = resolver
        self.namer = namer
        self.world_size = world_size
        self.rank = rank
        self.names: dict[str, str] = {}
        self.sizes: dict[str, int] = {}
        # IR name -> its subgroups ([] for the whole world), in order of first use.
        self.decls: dict[str, list[list[int]]] = {}
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
        if self.permissive:  # support checks: any group (the whole world), size unknown
            self.names[key] = f"g{len(self.names)}"
            self.decls[self.names[key]] = []
            return self.names[key]
        if self.resolver is None:
            raise UnsupportedGraph(f"{where}: names c10d group '{key}' but no group resolver "
                                   "was given")
        raw = list(self.resolver(key))
        subgroups = [list(s) for s in raw] if raw and not isinstance(raw[0], int) else [raw]
        ir_name = self.namer(subgroups, key) if self.namer else f"g{len(self.names)}"
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
        whole = len(subgroups) == 1 and flat == list(range(self.world_size))
        self.decls[ir_name] = [] if whole else subgroups
        self.names[key] = ir_name
        self.sizes[key] = len(subgroups[0])
        return ir_name
