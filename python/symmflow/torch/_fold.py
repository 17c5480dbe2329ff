"""Folds the input-independent part of an ATen graph into constants before it is split and
imported (Note [folding input-independent values]).

What it does: `fold_input_independent(gm)` evaluates, once, with PyTorch itself, every node whose
value depends on no graph input (only on the graph's constants and literal arguments: position
ids from `arange`, a causal mask from comparisons of them, their casts and expansions), and
replaces the last such node of each chain (one whose value a node that depends on inputs reads) by
a constant of the graph module, contiguous. It returns how many nodes it evaluated and how many
constants it made.
Expects: an inference, forward or backward ATen graph from AOT autograd (static shapes), called
outside any fake mode's tracing (the backend's compile functions are).
Guarantees: only deterministic, functional ATen and prims ops are evaluated (no random op, no
op that writes an argument, no `empty`, no collective, nothing of another namespace); a value
larger than MAX_BYTES is left to run each call, and so is every node that reads it; graph outputs
are never replaced (a caller gets a fresh tensor each call, as before); the graph computes what it
did, now from constants.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

__all__ = ["MAX_BYTES", "attr", "fold_input_independent"]

# The largest folded constant: larger input-independent values (a long sequence's full mask)
# are computed each call rather than kept for the program's lifetime.
MAX_BYTES = 16 << 20

_NEVER = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
          "empty_permuted"}


# Note [folding input-independent values]: transformers' models build their position ids and
# causal masks from `arange`, `add`, comparisons, `expand` and casts of the sequence length:
# values that depend on shapes only. Imported as they are, they were a dozen of the 67 kernel
# launches of a two-layer Llama stack's call on a GPU, each a tiny 64-bit integer program. They
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


def fold_input_independent(gm: torch.fx.GraphModule) -> tuple[int, int]:
    """Folds gm in place; returns (nodes evaluated, constants made)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    known: dict[torch.fx.Node, object] = {}
    evaluated: list[torch.fx.Node] = []
    with unset_fake_temporarily(), torch.no_grad():
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                known[node] = attr(gm, node.target)
                continue
            if not _foldable(node):
                continue
            inputs = node.all_input_nodes
            if any(i not in known for i in inputs):
                continue
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: known[n])
            value = node.target(*args, **kwargs)
            if _size(value) > MAX_BYTES:
                continue
            known[node] = value
            evaluated.append(node)
    made = 0
    for node in evaluated:
        value = known[node]
        if not isinstance(value, torch.Tensor):
            continue
        readers = [u for u in node.users if u not in known]
        if not readers or any(u.op == "output" for u in node.users):
            continue
        name = f"_symmflow_folded_{made}"
        while hasattr(gm, name):
            name += "_"
        gm.register_buffer(name, value.contiguous())
        with gm.graph.inserting_before(node):
            constant = gm.graph.get_attr(name)
        constant.meta = dict(node.meta)
        node.replace_all_uses_with(constant, delete_user_cb=lambda u: u not in known)
        made += 1
    if made:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return len(evaluated), made
