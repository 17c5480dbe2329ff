"""Folds the input-independent part of an ATen graph into constants before it is split and
imported (Note [folding input-independent values]).

What it does: `fold_input_independent(gm)` evaluates, once, with PyTorch itself, every node whose
value depends on no graph input (only on the graph's constants and literal arguments: position
ids from `arange`, a causal mask from comparisons of them, their casts and expansions), and
replaces the last such node of each chain (one whose value a node that depends on inputs reads) by
a constant of the graph module, contiguous. It returns how many nodes left the graph and how many
constants replaced them.
Expects: an inference, forward or backward ATen graph from AOT autograd (static shapes), called
outside any fake mode's tracing (the backend's compile functions are).
Guarantees: only deterministic, functional ATen and prims ops (and getitem) are evaluated (no
random op, no op that writes an argument, no `empty`, no collective, nothing of another
namespace), with autocast off; nothing an op of the graph writes in place, nor anything it is
computed from, is folded; a value traced larger than MAX_BYTES, or past MAX_TOTAL_BYTES in all,
is never evaluated and runs each call, as does every node that reads it, a node whose evaluation
raises, or one whose value differs in dtype or shape from its trace; graph outputs are never
replaced (a caller gets a fresh tensor each call, as before); a constant never shares storage
with one of the graph's own; GPU constants are complete before the graph first runs; the graph
computes what it did, now from constants.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

__all__ = ["MAX_BYTES", "MAX_TOTAL_BYTES", "attr", "fold_input_independent"]

# The largest folded constant: larger input-independent values (a long sequence's full mask)
# are computed each call rather than kept for the program's lifetime.
MAX_BYTES = 16 << 20
# The most a graph evaluates for folding in all, and so the most it keeps folded (per-layer
# masks of a long sequence would add up).
MAX_TOTAL_BYTES = 64 << 20

_NEVER = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
          "empty_permuted"}


# Note [folding input-independent values]: transformers' models build their position ids and
# causal masks from `arange`, `add`, comparisons, `expand` and casts of the sequence length:
# values that depend on shapes only. Imported as they are, they were 10 of the 67 kernel launches
# of a two-layer Llama stack's call on a GPU (67 -> 57 with folding, docs/cuda.md), each a tiny
# 64-bit integer program. They
# are computed here once, by PyTorch on the graph's device, and enter the partition as constants
# (made contiguous so that binding them copies nothing; the same tensor every call, like the
# graph's own constants, Note [CPU scalars on a GPU] in _runner.py). Only a chain's last node is
# kept, so the intermediate values are freed; the CompileReport counts them (`folded_nodes`,
# `folded_constants`, and a line of its text).
def _foldable(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return False
    target = node.target
    if target is operator.getitem:
        return True
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if target.namespace not in ("aten", "prims"):
        return False
    if target._schema.is_mutable or torch.Tag.nondeterministic_seeded in target.tags:
        return False
    return target.overloadpacket.__name__ not in _NEVER


def attr(gm: torch.fx.GraphModule, target: str):
    """The graph module's attribute named by a get_attr node's (dotted) target."""
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _size(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_size(v) for v in value)
    return 0


def _traced_size(node: torch.fx.Node) -> int:
    """The bytes of a node's value as traced (its meta), before anything is evaluated."""
    return _size(node.meta.get("val"))


def _as_traced(value, node: torch.fx.Node) -> bool:
    """Whether an evaluated value has the dtype and shape the graph traced for the node."""
    traced = node.meta.get("val")
    if isinstance(traced, torch.Tensor):
        return (isinstance(value, torch.Tensor) and value.dtype == traced.dtype
                and tuple(value.shape) == tuple(traced.shape))
    return True


def _written(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """Nodes an op of the graph writes in place, and every node they are computed from, and
    every get_attr of a constant whose storage such a node reads (a tracer gives each use of a
    constant a get_attr of its own): none of them is folded, since a constant snapshot would miss
    the write (AOT's graphs are functional, so this is empty there; a graph with a mutation, such
    as a KV cache updated in place, keeps its values computed each call)."""
    written = _written_nodes(gm)
    storages = {attr_storage(attr(gm, n.target)) for n in written if n.op == "get_attr"}
    storages.discard(None)
    for node in gm.graph.nodes:
        if node.op == "get_attr" and attr_storage(attr(gm, node.target)) in storages:
            written.add(node)
    return written


def written_args(node: torch.fx.Node) -> list:
    """The arguments (FX values as the node holds them: nodes, lists of nodes) that the op of
    `node` writes in place, by its schema's alias annotations; [] for anything else."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) or \
            not target._schema.is_mutable:
        return []
    return [node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
            for i, arg in enumerate(target._schema.arguments)
            if arg.alias_info is not None and arg.alias_info.is_write]


def _written_nodes(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """The nodes an op writes in place, and every node they are computed from."""
    written: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        for value in written_args(node):
            stack = []
            torch.fx.node.map_arg(value, stack.append)
            while stack:
                n = stack.pop()
                if n not in written:
                    written.add(n)
                    stack.extend(n.all_input_nodes)
    return written


def fold_input_independent(gm: torch.fx.GraphModule) -> tuple[int, int]:
    """Folds gm in place; returns (nodes removed from the graph, constants made)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    written = _written(gm)
    known: dict[torch.fx.Node, object] = {}
    evaluated: list[torch.fx.Node] = []
    total = 0
    with unset_fake_temporarily(), torch.no_grad(), _no_autocast():
        for node in gm.graph.nodes:
            if node in written:
                continue
            if node.op == "get_attr":
                known[node] = attr(gm, node.target)
                continue
            if not _foldable(node):
                continue
            inputs = node.all_input_nodes
            if any(i not in known for i in inputs):
                continue
            size = _traced_size(node)
            if size > MAX_BYTES or total + size > MAX_TOTAL_BYTES:
                continue  # never materialised: sized from the trace first
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: known[n])
            try:
                value = node.target(*args, **kwargs)
            except Exception:  # noqa: BLE001 (an op that cannot run here runs each call)
                continue
            if (_size(value) > MAX_BYTES or total + _size(value) > MAX_TOTAL_BYTES
                    or not _as_traced(value, node)):
                continue  # a node without a trace is capped by what it made
            known[node] = value
            total += _size(value)
            evaluated.append(node)
    attrs = {attr_storage(v) for n, v in known.items() if n.op == "get_attr"}
    made = 0
    for node in evaluated:
        value = known[node]
        if not isinstance(value, torch.Tensor):
            continue
        readers = [u for u in node.users if u not in known]
        if not readers or any(u.op == "output" for u in node.users):
            continue
        fill = _uniform(value)
        if fill is not None:  # Note [uniform constants are fills]
            with gm.graph.inserting_before(node):
                constant = gm.graph.call_function(
                    torch.ops.aten.full.default, (list(value.shape), fill),
                    {"dtype": value.dtype, "layout": torch.strided, "device": value.device,
                     "pin_memory": False})
        else:
            name = f"_symmflow_folded_{made}"
            while hasattr(gm, name):
                name += "_"
            gm.register_buffer(name, _own_contiguous(value, attrs))
            with gm.graph.inserting_before(node):
                constant = gm.graph.get_attr(name)
        constant.meta = dict(node.meta)
        node.replace_all_uses_with(constant, delete_user_cb=lambda u: u not in known)
        made += 1
    removed = 0
    if made:
        gm.graph.eliminate_dead_code()
        present = set(gm.graph.nodes)  # dead code the graph had before is not counted
        removed = sum(n not in present for n in evaluated)
        gm.recompile()
        constants = [attr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"]
        devices = {c.device for c in constants if isinstance(c, torch.Tensor) and c.is_cuda}
        for device in devices:  # computed on each device's compile-time stream; read on any other
            torch.cuda.synchronize(device)
    return removed, made


# Note [uniform constants are fills]: AOT autograd's backward of a slice (rotate_half's, in the
# rotary embedding) scatters the gradient into `new_zeros` of the whole activation; folded, that
# zero tensor was a constant as large as the activation (16 MiB a layer at 2048 tokens of 32
# heads in bf16) and it hid, behind a graph input, that the scatters' base is zero. A folded value
# whose elements are all equal becomes `aten.full(shape, value)` instead: no memory held, one
# fill per call where it is still needed, and the compiler sees the zeros (raise_rotary turns
# the rotary embedding's backward into one fused node with them: Note [rotary backward]).
def _uniform(value: torch.Tensor):
    """The one value of every element of a tensor of more than one (a Python number), or
    None (one element, none, values that differ, NaN, a dtype `full` does not make)."""
    integral = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
    if value.numel() < 2 or not (value.dtype.is_floating_point or value.dtype in integral):
        return None
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        first = value.reshape(-1)[0]
        if not bool(torch.all(value == first)):
            return None
        return first.item()


def attr_storage(value):
    """The address of a tensor's storage (None for anything else, or an empty one)."""
    if isinstance(value, torch.Tensor):
        return value.untyped_storage().data_ptr() or None
    return None


def _own_contiguous(value: torch.Tensor, attrs: set) -> torch.Tensor:
    """`value` contiguous, in storage of its own: never the graph's own constant itself (a
    reader that writes its argument would change both)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        constant = value.contiguous()
        if attr_storage(constant) is not None and attr_storage(constant) in attrs:
            constant = constant.clone()
    return constant


class _no_autocast:
    """Autocast off on every device for the evaluation: the traced graph holds its casts."""

    def __enter__(self):
        self._contexts = [torch.autocast("cpu", enabled=False)]
        if torch.cuda.is_available():
            self._contexts.append(torch.autocast("cuda", enabled=False))
        for c in self._contexts:
            c.__enter__()
        return self

    def __exit__(self, *exc):
        for c in reversed(self._contexts):
            c.__exit__(*exc)
        return False
