"""Causal masks recognised: an attention whose mask is the causal one runs with is_causal instead
(Note [causal masks recognised]).

What it does: `causal_masks_traced(gm)` on dynamo's graph (after `keep_attention_whole`, before
AOT autograd, so that a training step saves no mask and its backward runs causal too) and
`causal_masks(gm)` on an ATen graph (what the first could not evaluate: its evaluator knows a
short list of torch functions and methods, the second every functional ATen op) each find every
call of symmflow's attention op (forward and backward, `_sdpa.py`) whose `attn_mask` depends on
no graph input, evaluate that mask once with PyTorch, and where every [L, S] slice of it is the
top-left causal pattern (key j visible to query i iff j <= i: True / False for a bool mask, 0 /
-inf or a value at most half the dtype's lowest for an additive one), rewrite the call to
`attn_mask=None, is_causal=True`; the mask's nodes are then removed when nothing else reads them
(those nodes only: Note [only the mask's nodes removed]). Returns how many calls it rewrote.
Expects: dynamo's graph (static shapes) after `keep_attention_whole`, or an ATen graph from AOT
autograd before folding; the backend calls both outside any fake mode's tracing.
Guarantees: the graph computes what it did (PyTorch's is_causal is this top-left pattern, and every
symmflow attention kernel implements it); a mask read from an input (padding, a KV cache's
positions), one of another pattern (sliding windows, bottom-right causal with L != S) or one whose
chain holds an op folding would not evaluate is left as it was; the evaluation's values are freed
on return.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from . import _fold

__all__ = ["causal_masks", "causal_masks_traced"]

# The largest value of a mask's chain evaluated to test it: a full mask of 32k x 32k bools is 1 GiB.
MAX_EVAL_BYTES = 1 << 30


# Note [causal masks recognised]: under torch.compile transformers' models do not let SDPA skip
# the mask (they cannot tell, while tracing, that there is no padding), so a prefill's attention
# gets the full causal mask built from `arange` and comparisons. Folded (Note [folding
# input-independent values]) it still costs a bias of L x S elements written per layer and call
# (cuDNN reads masks as an additive bias) and keeps cuDNN from skipping the masked half of the
# scores; past folding's size cap (16 MiB: 4096 tokens) the mask itself was computed every call
# (two H200s, Qwen3 at 8192 tokens: 0.61 ms of a 10.2 ms prefill). A mask that depends on no input
# is evaluated here once; if it is the causal pattern the call becomes is_causal. On dynamo's
# graph first: rewritten after AOT autograd, a training step's forward would still save the mask
# for the backward, whose attention reads it as an input and could not be rewritten.
def causal_masks(gm: torch.fx.GraphModule) -> int:
    written: set | None = None  # found once, and only for a graph with a masked attention

    def evaluate(mask, values):
        nonlocal written
        if written is None:
            written = _fold._written(gm)
        return _evaluate(gm, mask, written, values)
    return _rewrite(gm, evaluate)


def causal_masks_traced(gm: torch.fx.GraphModule) -> int:
    return _rewrite(gm, lambda mask, values: _evaluate_traced(mask, values))


def _rewrite(gm: torch.fx.GraphModule, evaluate) -> int:
    """Rewrites each attention call whose mask `evaluate(mask node, cache)` finds causal."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    targets = _attention_targets()
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in targets]
    if not calls:
        return 0
    rewritten = 0
    with unset_fake_temporarily(), torch.no_grad(), _fold._no_autocast():
        values: dict[torch.fx.Node, object] = {}
        for node in calls:
            args = _arguments(node)
            mask = args.get("attn_mask")
            if not isinstance(mask, torch.fx.Node) or args.get("is_causal") or \
                    args.get("dropout_p"):
                continue
            value = evaluate(mask, values)
            if not isinstance(value, torch.Tensor) or not _is_causal(value):
                continue
            args["attn_mask"], args["is_causal"] = None, True
            names = [a.name for a in node.target._schema.arguments]
            node.args = tuple(args[n] for n in names if not _keyword_only(node.target, n))
            node.kwargs = {n: args[n] for n in names if _keyword_only(node.target, n)}
            rewritten += 1
    if rewritten:
        _erase_unread(gm.graph, {n for n, v in values.items() if v is not None})
        gm.recompile()
    return rewritten


# Note [only the mask's nodes removed]: after a rewrite the mask's chain is dead, but FX's
# eliminate_dead_code must not remove it: it counts every method call of dynamo's graph as pure,
# so it also took each in-place method whose result goes unused (transformers' StaticCache made in
# a first call: `keys.index_copy_(...)`, `cumulative_length.add_(...)`). The cache was never
# written and the prefill's attention read zeros: wrong logits with no error, on the GPU machines
# (whose torch 2.11 builds the mask). Only nodes the evaluator computed are candidates, each a
# function or method of its pure lists (or a foldable ATen op): they are erased, last first, when
# nothing reads them any more.
def _erase_unread(graph: torch.fx.Graph, evaluated: set) -> None:
    for node in reversed(list(graph.nodes)):
        if node in evaluated and not node.users:
            graph.erase_node(node)


def _attention_targets() -> set:
    from . import _sdpa  # noqa: F401  (registers the ops)

    return {torch.ops.symmflow.scaled_dot_product_attention.default,
            torch.ops.symmflow.scaled_dot_product_attention_backward.default}


def _keyword_only(op, name: str) -> bool:
    return next(a.kwarg_only for a in op._schema.arguments if a.name == name)


def _arguments(node: torch.fx.Node) -> dict:
    """Every schema argument of the call by name, defaults filled in."""
    out = {}
    schema = node.target._schema.arguments
    for i, a in enumerate(schema):
        if not a.kwarg_only and i < len(node.args):
            out[a.name] = node.args[i]
        elif a.name in node.kwargs:
            out[a.name] = node.kwargs[a.name]
        else:
            out[a.name] = a.default_value if a.has_default_value() else None
    return out


def _unknown_ancestors(node: torch.fx.Node, values: dict) -> list:
    """`node` and its ancestors not in `values`, each after its inputs."""
    order, stack, seen = [], [] if node in values else [node], set()
    while stack:
        n = stack[-1]
        pending = [i for i in n.all_input_nodes if i not in seen and i not in values]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        if n not in seen:
            seen.add(n)
            order.append(n)
    return order


def _evaluate(gm, node: torch.fx.Node, written: set, values: dict):
    """The value of `node` computed from constants and literals alone, or None where it reads an
    input, a written value, an op folding does not evaluate, or a value past MAX_EVAL_BYTES."""
    for n in _unknown_ancestors(node, values):
        value = None
        if n in written:
            pass
        elif n.op == "get_attr":
            value = _fold.attr(gm, n.target)
        elif _fold._foldable(n) and _fold._traced_size(n) <= MAX_EVAL_BYTES and \
                all(values.get(i) is not None for i in n.all_input_nodes):
            args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda i: values[i])
            try:
                value = n.target(*args, **kwargs)
            except Exception:  # noqa: BLE001 (an op that cannot run here: not recognised)
                value = None
        values[n] = value
    return values[node]


# What dynamo's graph may compute a mask with, for _evaluate_traced: functions and tensor methods
# that only make a new value from their arguments (no in-place method, nothing random).
_TRACED_FUNCTIONS = {
    torch.arange, torch.ones, torch.zeros, torch.full, torch.tril, torch.triu, torch.where,
    torch.logical_and, torch.logical_or, torch.logical_not, torch.ones_like, torch.zeros_like,
    torch.full_like, torch.eq, torch.ne, torch.le, torch.lt, torch.ge, torch.gt,
    operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg,
    operator.le, operator.lt, operator.ge, operator.gt, operator.eq, operator.ne,
    operator.and_, operator.or_, operator.invert, operator.getitem,
}
_TRACED_METHODS = {
    "expand", "expand_as", "to", "view", "reshape", "unsqueeze", "squeeze", "bool", "float",
    "masked_fill", "logical_and", "logical_or", "logical_not", "le", "lt", "ge", "gt", "eq", "ne",
    "tril", "triu", "contiguous", "clone", "transpose", "permute", "__and__", "__or__",
    "__invert__", "__getitem__",
}


def _evaluate_traced(node: torch.fx.Node, values: dict):
    """The value of a dynamo graph's node computed from literals alone, or None where it reads an
    input (a placeholder), an attribute, or a function or method outside the lists above, or
    where a value would pass MAX_EVAL_BYTES."""
    for n in _unknown_ancestors(node, values):
        known = all(values.get(i) is not None for i in n.all_input_nodes)
        example = n.meta.get("example_value")
        small = not isinstance(example, torch.Tensor) or \
            example.numel() * example.element_size() <= MAX_EVAL_BYTES
        value = None
        if known and small and ((n.op == "call_function" and n.target in _TRACED_FUNCTIONS) or
                                (n.op == "call_method" and n.target in _TRACED_METHODS)):
            args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda i: values[i])
            try:
                value = n.target(*args, **kwargs) if n.op == "call_function" else \
                    getattr(args[0], n.target)(*args[1:], **kwargs)
            except Exception:  # noqa: BLE001 (not evaluable here: not recognised)
                value = None
        values[n] = value
    return values[node]


def _is_causal(mask: torch.Tensor, rows_at_once: int = 1024) -> bool:
    """Whether every [L, S] slice of `mask` is the top-left causal pattern; compared a block of
    rows at a time, so that no second mask-sized tensor is made (a 32k-token mask is 1 GiB)."""
    if mask.dim() < 2 or not (mask.dtype == torch.bool or mask.dtype.is_floating_point):
        return False
    rows, cols = mask.shape[-2:]
    keys = torch.arange(cols, device=mask.device)
    for first in range(0, rows, rows_at_once):
        part = mask[..., first:first + rows_at_once, :]
        queries = torch.arange(first, first + part.shape[-2], device=mask.device)[:, None]
        keep = keys[None, :] <= queries
        if mask.dtype == torch.bool:
            same = torch.all(part == keep)
        else:  # additive: 0 where kept, -inf (or at most half the dtype's lowest) elsewhere
            blocked = part <= torch.finfo(mask.dtype).min / 2
            same = torch.all((part == 0) == keep) & torch.all(blocked == ~keep)
        if not bool(same):
            return False
    return True
