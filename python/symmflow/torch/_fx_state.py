"""What a model keeps between calls, as the importer translates it (a mixin of
_fx_import.NodeTranslator): a KV cache written in place (Note [the KV cache in place]), the index
lists with None of its update (Note [index lists with None]), and a Python int that changes every
call (Note [ints that change every call]).

Expects: the NodeTranslator's state (builder, values, inputs, written) and its call/arg methods.
Guarantees: each method records the node's IR value or raises UnsupportedGraph naming why.
"""
from __future__ import annotations

import operator
from typing import Any, Sequence

import torch
import torch.fx

import symmflow
from symmflow.torch._groups import UnsupportedGraph


def node_val(node: torch.fx.Node) -> Any:
    return node.meta.get("val", node.meta.get("example_value"))


INT_OPS = {operator.add: "add", operator.sub: "sub", operator.mul: "mul", torch.sym_max: "max",
            torch.sym_min: "min"}


# What a counter the graph advances in place is computed with (Note [counters in place]): symmflow's
# op of each name; the in-place op it becomes is the registry's in-place variant of that op.
COUNTER_OPS = {"aten.add.Tensor": "aten::add.Tensor", "aten.sub.Tensor": "aten::sub.Tensor"}


def int_input(v: Any) -> bool:
    return isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool)


def written_back_to_self(node: torch.fx.Node) -> bool:
    """Whether `node`'s result is copied back into its first argument, a graph input
    (`copy_(self, node)`: Note [the KV cache in place])."""
    self_node = node.args[0]
    return isinstance(self_node, torch.fx.Node) and self_node.op == "placeholder" and any(
        u.target is torch.ops.aten.copy_.default and u.args[0] is self_node and
        u.args[1] is node for u in node.users)


def integer_indices(indices: Sequence[Any]) -> bool:
    """Whether an index list holds integer index tensors (and None), no bool mask."""
    vals = [node_val(i) if isinstance(i, torch.fx.Node) else i for i in indices if i is not None]
    return bool(vals) and all(isinstance(v, torch.Tensor) and v.dtype != torch.bool
                              for v in vals)


class StateTranslation:
    """NodeTranslator's translations of a model's state (see the module doc)."""

    # Note [ints that change every call]: a model may keep a Python int that changes every call
    # (Mistral's sliding-window decode step: its cache's length); dynamo makes it a SymInt input
    # after the first change, and the step's graph computes with it (`sub = s0 - 4`, `sym_max( sub
    # + 1, 0)`, `arange + s0`) and returns `s0 + 1`. The importer makes such an input a 0-dim i64
    # IR input (the runner passes the int as a tensor), the int arithmetic aten calls on 0-dim
    # tensors (add, sub, mul; sym_max / sym_min against a literal as clamp), a tensor op taking the
    # int takes the 0-dim tensor (broadcast, PyTorch's type promotion for a 0-dim operand), and an
    # int output comes back as a Python int. An int that sizes a tensor (a dynamic shape) is still
    # refused, named: symmflow compiles static shapes.
    def _int_op(self, node: torch.fx.Node, where: str, name: str) -> None:
        kind = INT_OPS[node.target]
        a, b = node.args
        for x in (a, b):
            if isinstance(x, torch.fx.Node):
                if not int_input(node_val(x)):
                    raise UnsupportedGraph(f"{where}: operand {x.name} is not an int")
            elif not int_input(x):
                raise UnsupportedGraph(f"{where}: operand {x!r} is not an int")
        if not isinstance(a, torch.fx.Node) and not isinstance(b, torch.fx.Node):
            raise UnsupportedGraph(f"{where}: an int computed from literals alone")
        if kind == "sub" and not isinstance(a, torch.fx.Node):
            op, args = "aten::rsub.Scalar", [b, a]
        else:
            if not isinstance(a, torch.fx.Node):  # add, mul, max, min commute
                a, b = b, a
            literal = not isinstance(b, torch.fx.Node)
            if kind in ("max", "min"):
                if not literal:
                    raise UnsupportedGraph(f"{where}: the {kind} of two computed ints")
                op, args = "aten::clamp", [a, b, None] if kind == "max" else [a, None, b]
            else:
                op, args = f"aten::{kind}.{'Scalar' if literal else 'Tensor'}", [a, b]
        (r,) = self.call(op, args, {}, where, name)
        self.values[node] = r

    # Note [the KV cache in place]: a decode step writes one token into the KV cache, a graph
    # input, and the cache must stay the caller's storage: no copy in, no copy out (issue 37). AOT
    # autograd keeps an inference graph's input mutations in the graph
    # (keep_inference_input_mutations, as inductor asks): `r = index_put(cache, idx, k)` then
    # `copy_(cache, r)` at the end. The importer writes the index_put, when its indices are integer
    # tensors and its result is copied back into its self, as functional<index_put_>: the same
    # value, but a functional node that reinplace may turn back into the in-place write (an
    # index_put of anything else stays index_put, whose out-of-place write is no added copy); and
    # a copy_ into a graph input of a value of its dtype and shape as `writeback cache = r` (the
    # program's own write-back, no copy node). Reinplace then writes the cache in place, since `r`
    # is exactly what is written back and nothing reads the old cache after it (Note in
    # passes/reinplace.cpp's contract), and the writeback reads `writeback cache = cache`: nothing
    # to copy. Where the old cache is still read after the write the functional node stays, with a
    # copy that explain names; other copy_ targets (a value computed in the graph, another dtype or
    # shape) stay aten::copy_ in place.
    def _written_back(self, node: torch.fx.Node, where: str) -> bool:
        dst, src = node.args[0], node.args[1]
        if not (isinstance(src, torch.fx.Node) and dst in self.inputs):  # a graph input

            return False
        d, s = node_val(dst), node_val(src)
        if not (isinstance(d, torch.Tensor) and isinstance(s, torch.Tensor) and
                d.dtype == s.dtype and tuple(d.shape) == tuple(s.shape)):
            return False
        value = self.arg(src, where)
        try:
            self.builder.add_writeback(self.inputs[dst], value)
        except symmflow.Error as e:
            raise UnsupportedGraph(f"{where}: {e}") from None
        self.written.add(dst)
        # The input holds the new value from here on: a later read of it reads that.
        self.values[dst] = self.values[node] = value
        return True

    # Note [counters in place]: StaticCache's length counter is advanced in place every call
    # (`cumulative_length.add_(n)`), which AOT autograd keeps as `r = add(counter, n)` then
    # `copy_(counter, r)`: imported as is, the plan computed r into a buffer of its own and copied
    # its 8 bytes back into the caller's counter, one compiler-added copy per layer and call. An
    # add or sub of a graph input whose result is written back into it, of the same dtype and
    # shape, is imported as functional<add_> (or sub_), like the cache's index_put (Note [the KV
    # cache in place]): reinplace then adds in the caller's tensor, and the writeback copies
    # nothing. A number operand becomes a 0-dim constant of the counter's dtype (the in-place ops
    # take a Tensor). Where the old value is still read after the add, the functional node stays,
    # with its copy named by explain.
    def _counter_in_place(self, node: torch.fx.Node, op: str, where: str, name: str) -> bool:
        self_node, other = node.args[0], node.args[1]
        val, self_val = node_val(node), node_val(self_node) if isinstance(
            self_node, torch.fx.Node) else None
        if not (written_back_to_self(node) and isinstance(val, torch.Tensor) and
                isinstance(self_val, torch.Tensor) and val.dtype == self_val.dtype and
                tuple(val.shape) == tuple(self_val.shape)):
            return False
        if isinstance(other, bool) or not isinstance(other, (int, float, torch.fx.Node)):
            return False
        inplace = self.catalogue.inplace_of(COUNTER_OPS[op])
        if inplace is None:
            return False
        self._check_result(node, where)
        if not isinstance(other, torch.fx.Node):
            (other,) = self.call("aten::scalar_tensor", [other], {"dtype": self_val.dtype}, where,
                                 f"{name}_other")
        kwargs = dict(node.kwargs)
        (self.values[node],) = self.call(inplace, [self_node, other], kwargs, where, name,
                                         functional=True)
        return True

    # Note [index lists with None]: `cache[:, :, pos] = k`, the KV-cache update of transformers'
    # StaticCache, is index_put(cache, [None, None, pos], k): a `Tensor?[]` whose None entries keep
    # a dim whole. The IR's value lists hold values only, so the cache update left symmflow twice a
    # layer (3 partitions for a 2-layer decode step). The same update is written with index tensors
    # alone: each leading None becomes arange(size) viewed along its own dim, and the index tensors
    # after it are viewed past those dims; together they broadcast to the leading sizes followed by
    # the indices' shape, the advanced dims stay adjacent, so the indexed elements and values'
    # shape are PyTorch's exactly. The aranges depend on no input: the backend evaluates them once
    # into constants. Trailing None entries mean what an omitted index means. A None after an index
    # tensor (advanced dims not leading) is refused, named.
    def _indices_without_none(self, node: torch.fx.Node, indices: list, where: str,
                              name: str) -> list:
        while indices and indices[-1] is None:
            indices.pop()
        lead = 0
        while lead < len(indices) and indices[lead] is None:
            lead += 1
        rest = indices[lead:]
        if not rest:
            raise UnsupportedGraph(f"{where}: an index list of None alone (the whole tensor) is "
                                   "not supported")
        if any(i is None for i in rest):
            raise UnsupportedGraph(f"{where}: an index list with None after an index tensor "
                                   "(advanced indices not leading) is not supported")
        shapes = []
        for i in rest:
            val = node_val(i) if isinstance(i, torch.fx.Node) else None
            if not isinstance(val, torch.Tensor) or val.dtype == torch.bool:
                raise UnsupportedGraph(f"{where}: index entries after None must be integer "
                                       "tensors")
            shapes.append([int(s) for s in val.shape])
        rank = max(len(s) for s in shapes)
        sizes = [int(s) for s in node_val(node.args[0]).shape]
        out = []
        for j in range(lead):
            dims = [1] * (lead + rank)
            dims[j] = sizes[j]
            (r,) = self.call("aten::arange.start_step", [0, sizes[j], 1],
                             {"dtype": torch.int64}, where, f"{name}_dim{j}")
            (v,) = self.call("aten::reshape", [r, dims], {}, where, f"{name}_dim{j}_view")
            out.append(v)
        for k, (i, shape) in enumerate(zip(rest, shapes)):
            dims = [1] * (lead + rank - len(shape)) + shape
            (v,) = self.call("aten::reshape", [i, dims], {}, where, f"{name}_index{k}_view")
            out.append(v)
        return out
