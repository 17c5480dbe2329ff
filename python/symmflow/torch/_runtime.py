"""symmflow's world inside torch.distributed's (issue 17, item 2).

`init()` makes this process a rank of a symmflow world that meets through torch.distributed's own
store (the c10d store that `init_process_group` or torchrun set up), so no second rendezvous is
configured: the store bootstrap of the C++ runtime (include/symmflow/runtime/store.hpp) reads and
writes keys under the prefix "symmflow/" through Python callbacks. The rank and world size are
torch.distributed's. Heaps live in host shared memory (CPU) or GPU memory shared by file
descriptors; every wait is bounded by `timeout_s`, and a rank that fails poisons the world so that
its peers raise naming it (docs/runtime.md).

c10d process groups appear in traced graphs by name ("0", "3", ...); `resolve_group(name)` turns
one into a symmflow group with the same ranks (Note [group names]).

Expects: torch.distributed initialised (any backend: gloo on CPU, nccl on GPUs). Guarantees: one
world per process (a second init() returns it), torn down at exit. Refuses: no process group, a
world size that changed since init() (a new world needs a new process).
"""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

import symmflow

_lock = threading.Lock()
_rank: "symmflow.Rank | None" = None
_groups: dict[str, "GroupInfo"] = {}
_local_groups: dict[str, "GroupInfo"] = {}


def group_name(subgroups) -> str:
    """The symmflow name of a split of the world (Note [group names]): derived from its members
    only, so every rank, partition and graph of a process names one split alike."""
    key = tuple(tuple(int(r) for r in s) for s in subgroups)
    return "pg_" + hashlib.sha1(repr(key).encode()).hexdigest()[:10]


@dataclass(frozen=True)
class GroupInfo:
    """A c10d group as symmflow sees it: its symmflow name and every subgroup of its split."""

    name: str  # group_name(subgroups)
    subgroups: tuple[tuple[int, ...], ...]  # global ranks of every subgroup, this rank's included
    c10d_name: str


def init(*, timeout_s: float | None = None) -> "symmflow.Rank":
    """Joins (or returns) this process's symmflow world through torch.distributed's store.

    Collective: every rank of the default process group calls it (the first compiled call of a
    model does so by itself). `timeout_s` bounds every wait (default: the SYMMFLOW_TIMEOUT_S
    tunable, whose one default is C++'s: symmflow.tunables()["timeout_s"]).
    """
    global _rank
    with _lock:
        if not dist.is_available() or not dist.is_initialized():
            raise symmflow.Error(
                "symmflow.torch.init() needs torch.distributed initialised first: call "
                "torch.distributed.init_process_group() (torchrun sets RANK, WORLD_SIZE, "
                "MASTER_ADDR and MASTER_PORT)"
            )
        rank, world = dist.get_rank(), dist.get_world_size()
        if _rank is not None:
            if (_rank.rank, _rank.world_size) != (rank, world):
                raise symmflow.Error(
                    f"symmflow.torch.init(): the symmflow world is rank {_rank.rank} of "
                    f"{_rank.world_size} but torch.distributed is now rank {rank} of {world}; a "
                    "new world needs a new process"
                )
            return _rank
        store = c10d._get_default_store()
        _rank = symmflow.init_store(
            **symmflow.store_callbacks(store), rank=rank, world_size=world, prefix="symmflow",
            timeout_s=-1 if timeout_s is None else timeout_s,  # -1: the C++ tunable
        )
        return _rank


def current_rank() -> "symmflow.Rank":
    """The rank made by init(), joining the world first when needed."""
    return _rank if _rank is not None else init()


def resolve_group(c10d_name: str) -> GroupInfo:
    """The symmflow group of the c10d process group named `c10d_name` (Note [group names]).

    Collective over the world the first time a name is seen on a rank: every rank learns every
    subgroup of the split the group belongs to. For compiled graphs, which every rank of the world
    runs (rank agreement); eager ops resolve by the members alone (local_group).

    Note [group names]: c10d names a group by a counter or a hash of its ranks, so the subgroups of
    one split (`new_subgroups`, a DeviceMesh dimension) have different names on different ranks and
    a traced graph's text differs per rank, while symmflow needs one program on every rank. Each
    rank therefore publishes the global ranks of its group, all-gathered over the symmflow world;
    the set of distinct rank lists is the split, and its IR name is derived from that set
    (group_name), the same on every rank. exec::ensure_groups refuses a name reused for other
    members, so a name never silently means two splits.
    """
    with _lock:
        if c10d_name in _groups:
            return _groups[c10d_name]
    r = current_rank()
    pg = c10d._resolve_process_group(c10d_name)
    mine = tuple(dist.get_process_group_ranks(pg))
    gathered = r.allgather(json.dumps(mine).encode(), f"resolving process group '{c10d_name}'")
    subgroups = tuple(sorted({tuple(json.loads(g)) for g in gathered}))
    members = [x for s in subgroups for x in s]
    if len(members) != len(set(members)):
        raise symmflow.Error(
            f"process group '{c10d_name}': its subgroups overlap across ranks ({list(subgroups)}); "
            "symmflow groups split the world into disjoint subgroups"
        )
    # A new c10d group made to recover from a failed one gets fresh symmflow groups, compiled
    # graphs too (Note [poisoned groups]; _unpoisoned).
    name = _unpoisoned(group_name(subgroups))
    info = GroupInfo(name=name, subgroups=subgroups, c10d_name=c10d_name)
    with _lock:
        _groups[c10d_name] = info
    return info


def local_group(c10d_name: str) -> GroupInfo:
    """The symmflow group of this rank's own subgroup of the c10d group `c10d_name`, from its
    members alone: no exchange, so ranks outside it need not take part (issue 25: new_group([0, 1])
    used eagerly by ranks 0 and 1 waited out the timeout for idle ranks 2 and 3). Eager ops and
    empty() use it; making the runtime group (ensure_runtime_group) is then collective among the
    members only. Named by its members (group_name): the name resolve_group gives a group that is
    one subgroup (the world, or a group of the members alone); a split (new_subgroups, a
    DeviceMesh dimension) compiled in a graph gets resolve_group's name for the whole split, a
    runtime group of its own."""
    with _lock:
        if c10d_name in _local_groups:
            return _local_groups[c10d_name]
    pg = c10d._resolve_process_group(c10d_name)
    mine = tuple(int(r) for r in dist.get_process_group_ranks(pg))
    info = GroupInfo(name=_unpoisoned(group_name((mine,))), subgroups=(mine,),
                     c10d_name=c10d_name)
    with _lock:
        _local_groups[c10d_name] = info
    return info


def _unpoisoned(name: str) -> str:
    """`name`, or the first of name_r1, name_r2, ... (names the IR accepts) whose runtime group is not poisoned: a c10d
    group made after a collective of its members' group failed (Note [poisoned groups]: the
    documented recovery is a new group of the same ranks) gets symmflow memory and pads of its
    own. Every member finds the same name: the failure is published to every member before the
    call that raised returns."""
    r = current_rank()
    candidate, n = name, 0
    while r.group_poisoned(candidate):
        n += 1
        candidate = f"{name}_r{n}"
    return candidate


def device_of(tensors) -> str:
    """The symmflow device string for the tensors of a call ("cpu" or "cuda:<index>"). A 0-dim
    CPU tensor beside GPU tensors (a constant such as a mask's fill value, which PyTorch mixes
    with GPU tensors) does not count: Note [CPU scalars on a GPU] in _runner.py."""
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
    if any(t.device.type == "cuda" for t in tensors):
        tensors = [t for t in tensors if not (t.device.type == "cpu" and t.dim() == 0)]
    devices = {t.device for t in tensors}
    if not devices:
        return "cpu"
    if len(devices) > 1:
        raise symmflow.Error(f"a symmflow call got tensors on several devices: {sorted(map(str, devices))}")
    d = devices.pop()
    if d.type == "cpu":
        return "cpu"
    if d.type == "cuda":
        return f"cuda:{d.index if d.index is not None else torch.cuda.current_device()}"
    raise symmflow.Error(f"symmflow runs on cpu and cuda tensors, not {d.type}")


def ensure_runtime_group(info: GroupInfo) -> None:
    """Makes the symmflow runtime group of `info` on this rank (collective among the members of
    this rank's subgroup the first time), so that eager ops and empty() can name it."""
    r = current_rank()
    if r.has_group(info.name):
        return
    mine = next(s for s in info.subgroups if r.rank in s)
    r.new_group(info.name, list(mine))
