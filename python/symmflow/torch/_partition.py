"""Capability-based partitioning of an ATen FX graph into symmflow partitions and PyTorch ones.

What it does: `partition` asks, node by node, whether symmflow can import it (the importer's own
translation: a node is supported exactly when `_fx_import` translates it), groups supported nodes
with torch's `CapabilityBasedPartitioner` into `symmflow_<k>` submodules (each replaced by the
callable `compile_partition(sub_gm, example_inputs)` returns), groups the remaining compute
nodes into `torch_<k>` submodules run by PyTorch, and lists every boundary between the two with
the unsupported node that caused it (Note [boundaries]).
Expects: an FX GraphModule whose nodes carry `meta["val"]` (AOT autograd and make_fx set it), or
example inputs to propagate fake values from.
Guarantees: deterministic: partitions and boundaries are numbered in the graph's node order; the
split module computes what the original did (each partition's inputs and outputs are the
original values); partitions of only view/alias nodes are not handed to symmflow.
Refuses: nothing; a graph with no supported node gives one PyTorch partition.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable, Optional, Sequence

import torch
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from symmflow.torch import _fx_import, _opmap, _support
from symmflow.torch._opmap import Catalogue

CompilePartition = Callable[[torch.fx.GraphModule, Sequence[Any]], Callable[..., Any]]

SYMMFLOW_PREFIX = "symmflow_"
TORCH_PREFIX = "torch_"


class SymmflowSupport(OperatorSupportBase):
    """Says yes to nodes `_fx_import` can translate; remembers why it said no."""

    def __init__(self, catalogue: Catalogue, groups: Optional[_fx_import.GroupTable] = None,
                 device: Optional[str] = None):
        self.catalogue = catalogue
        self.groups = groups
        self.device = device  # Note [kernels per device] in _support.py
        self.reasons: dict[torch.fx.Node, str] = {}

    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        if node.op != "call_function":
            return False
        if node not in self.reasons:
            self.reasons[node] = _support.unsupported_reason(
                node, self.catalogue, self.groups, self.device) or ""
        return self.reasons[node] == ""


class _AnyCallFunction(OperatorSupportBase):
    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        return node.op == "call_function"


@dataclasses.dataclass
class PartitionInfo:
    """One partition: its submodule name in `split_gm`, the submodule, and why it runs where."""

    name: str
    submodule: torch.fx.GraphModule
    supported: bool  # True: compiled by symmflow
    reason: str


@dataclasses.dataclass
class PartitionResult:
    """The split module to run, its partitions in execution order, and the boundaries."""

    split_gm: torch.fx.GraphModule
    partitions: list[PartitionInfo]
    boundaries: list[str]

    def __iter__(self):
        """(submodule, supported, reason) triples, in execution order."""
        return iter([(p.submodule, p.supported, p.reason) for p in self.partitions])

    def __len__(self) -> int:
        return len(self.partitions)


# Note [boundaries]
# A boundary is a value crossing between a symmflow partition and a PyTorch partition, in either
# direction, counted once per (producer partition, consumer partition) pair. Each names the
# unsupported node on the PyTorch side of the edge (its consumer when symmflow feeds PyTorch, its
# producer when PyTorch feeds symmflow) and why symmflow does not take it. So one unsupported op
# between two symmflow partitions gives two boundaries.


def _has_compute(nodes: Sequence[torch.fx.Node]) -> bool:
    """Whether a partition does more than views, aliases and tuple items (Note [boundaries])."""
    for n in nodes:
        if n.op != "call_function" or n.target is operator.getitem:
            continue
        if _fx_import.is_view_node(n):
            continue
        rule = _opmap.RULES_BY_OP.get(_fx_import.describe_target(n))
        if rule is not None and rule.kind == "alias":
            continue
        return True
    return False


def _ensure_vals(gm: torch.fx.GraphModule, example_inputs: Optional[Sequence[Any]]) -> None:
    """Fills meta["val"] by fake propagation when some node lacks it."""
    if all("val" in n.meta for n in gm.graph.nodes if n.op not in ("output",)):
        return
    if example_inputs is None:
        raise ValueError("partition: nodes lack meta['val'] and no example inputs were given")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in example_inputs]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)


def _fuse(gm: torch.fx.GraphModule, support: OperatorSupportBase, prefix: str,
          keep: Callable[[list[torch.fx.Node]], bool]) -> torch.fx.GraphModule:
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    proposed = [p for p in partitioner.propose_partitions() if keep(list(p.nodes))]
    # Number partitions in node order (the partitioner's ids depend on its traversal).
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    proposed.sort(key=lambda p: min(order[n] for n in p.nodes))
    return partitioner.fuse_partitions(proposed, prefix=prefix)


def partition(gm: torch.fx.GraphModule, catalogue: Optional[Catalogue] = None, *,
              compile_partition: Optional[CompilePartition] = None,
              example_inputs: Optional[Sequence[Any]] = None,
              groups: Optional[_fx_import.GroupTable] = None,
              device: Optional[str] = None) -> PartitionResult:
    """Splits `gm` into symmflow partitions (compiled by `compile_partition`, when given) and
    PyTorch partitions; returns them with the boundaries (Note [boundaries]). `gm` is not
    modified. `device` ("cpu", "cuda:0"): nodes whose ops lack a kernel there stay in PyTorch
    (Note [kernels per device] in _support.py); None: any backend will do."""
    if catalogue is None:
        catalogue = _opmap.load_catalogue()
    gm = torch.fx.GraphModule(gm, _copy_graph(gm.graph))
    _ensure_vals(gm, example_inputs)
    support = SymmflowSupport(catalogue, groups, device)
    reasons_by_name: dict[str, str] = {}
    for n in gm.graph.nodes:
        if n.op == "call_function" and not support.is_node_supported({}, n):
            reasons_by_name[n.name] = support.reasons[n]
    split = _fuse(gm, support, SYMMFLOW_PREFIX, _has_compute)
    split = _fuse(split, _AnyCallFunction(), TORCH_PREFIX, lambda nodes: True)
    _number_in_call_order(split)
    partitions: list[PartitionInfo] = []
    owner: dict[str, str] = {}  # original node name -> partition name
    calls = [n for n in split.graph.nodes if n.op == "call_module"]
    for call in calls:
        sub = getattr(split, call.target)
        supported = call.target.startswith(SYMMFLOW_PREFIX)
        inner = [n for n in sub.graph.nodes if n.op == "call_function"]
        for n in inner:
            owner[n.name] = call.target
        if supported:
            reason = f"{len(inner)} nodes symmflow imports"
        else:
            first = next((n.name for n in inner if n.name in reasons_by_name), None)
            reason = reasons_by_name[first] if first else "left to PyTorch"
        partitions.append(PartitionInfo(call.target, sub, supported, reason))
    boundaries = _boundaries(split, calls, reasons_by_name)
    if compile_partition is not None:
        for call in calls:
            if not call.target.startswith(SYMMFLOW_PREFIX):
                continue
            sub = getattr(split, call.target)
            args = [n.meta.get("val") for n in sub.graph.nodes if n.op == "placeholder"]
            compiled = compile_partition(sub, args)
            setattr(split, call.target, CompiledPartition(compiled))
        split.recompile()
    return PartitionResult(split, partitions, boundaries)


def _number_in_call_order(split: torch.fx.GraphModule) -> None:
    """Renames the partitions `<prefix><k>` with k counting calls in graph order, per prefix."""
    calls = [n for n in split.graph.nodes if n.op == "call_module"]
    modules = {n.target: getattr(split, n.target) for n in calls}
    for n in calls:
        delattr(split, n.target)
    counts = {SYMMFLOW_PREFIX: 0, TORCH_PREFIX: 0}
    for n in calls:
        prefix = SYMMFLOW_PREFIX if n.target.startswith(SYMMFLOW_PREFIX) else TORCH_PREFIX
        name = f"{prefix}{counts[prefix]}"
        counts[prefix] += 1
        split.add_submodule(name, modules[n.target])
        n.target = name
    split.recompile()


class CompiledPartition(torch.nn.Module):
    """A compiled partition as the module the split graph calls."""

    def __init__(self, fn: Callable[..., Any]):
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def _copy_graph(graph: torch.fx.Graph) -> torch.fx.Graph:
    new = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    out = new.graph_copy(graph, env)
    new.output(out)
    for old, n in env.items():
        n.meta = dict(old.meta)
    return new


def _boundaries(split: torch.fx.GraphModule, calls: list[torch.fx.Node],
                reasons_by_name: dict[str, str]) -> list[str]:
    """The boundaries of Note [boundaries], in node order of their consumers."""
    def partition_of(n: torch.fx.Node) -> Optional[torch.fx.Node]:
        while n.op == "call_function" and n.target is operator.getitem and \
                isinstance(n.args[0], torch.fx.Node) and n.args[0].op == "call_module":
            n = n.args[0]
        return n if n.op == "call_module" else None

    def first_unsupported(sub: torch.fx.GraphModule, want_consumer_of: Optional[int],
                          want_producer_of: Optional[int]) -> str:
        # The unsupported node reading input `want_consumer_of`, or producing output
        # `want_producer_of`, of a PyTorch partition; else its first unsupported node.
        nodes = list(sub.graph.nodes)
        if want_consumer_of is not None:
            ph = [n for n in nodes if n.op == "placeholder"][want_consumer_of]
            users = sorted(ph.users, key=nodes.index)
            for u in users:
                if u.name in reasons_by_name:
                    return reasons_by_name[u.name]
        if want_producer_of is not None:
            outs = [n for n in nodes if n.op == "output"][0].args[0]
            outs = outs if isinstance(outs, (list, tuple)) else (outs,)
            o = outs[want_producer_of]
            while isinstance(o, torch.fx.Node) and o.target is operator.getitem:
                o = o.args[0]
            if isinstance(o, torch.fx.Node) and o.name in reasons_by_name:
                return reasons_by_name[o.name]
        for n in nodes:
            if n.name in reasons_by_name:
                return reasons_by_name[n.name]
        return "left to PyTorch"

    found: list[str] = []
    seen: set[tuple[str, str]] = set()
    for consumer in calls:
        for i, a in enumerate(consumer.args):
            if not isinstance(a, torch.fx.Node):
                continue
            producer = partition_of(a)
            if producer is None:
                continue
            p_sym = producer.target.startswith(SYMMFLOW_PREFIX)
            c_sym = consumer.target.startswith(SYMMFLOW_PREFIX)
            if p_sym == c_sym or (producer.target, consumer.target) in seen:
                continue
            seen.add((producer.target, consumer.target))
            if p_sym:  # symmflow feeds PyTorch: the PyTorch consumer's node is the cause
                why = first_unsupported(getattr(split, consumer.target), i, None)
            else:
                index = a.args[1] if a.op == "call_function" else 0
                why = first_unsupported(getattr(split, producer.target), None, index)
            found.append(f"boundary {len(found) + 1}: {why} "
                         f"({producer.target} -> {consumer.target})")
    return found
