"""Which FX nodes symmflow takes (Note [kernels per device]): `unsupported_reason` says why a
node cannot be imported, or None, by translating it alone into a scratch program with the same
NodeTranslator `_fx_import.import_graph` uses, so the C++ registry decides (its schemas, shape
functions and, for a device, its kernels and their checks), never a table here. The partitioner
(_partition.py) asks it of every node.
"""
from __future__ import annotations

import operator
from typing import Optional

import torch
import torch.fx

from symmflow import _core
from symmflow.torch import _opmap
from symmflow.torch._fx_import import NodeTranslator, describe_target
from symmflow.torch._fx_state import int_input, node_val
from symmflow.torch._groups import GroupTable, UnsupportedGraph, tensor_type
from symmflow.torch._opmap import Catalogue

__all__ = ["unsupported_reason"]


def _device_kind(device: Optional[str]) -> Optional[str]:
    """"cuda" for "cuda:1", "cpu" for "cpu"; None when no device is known."""
    return device.split(":", 1)[0] if device else None


def unsupported_reason(node: torch.fx.Node, catalogue: Catalogue,
                       groups: Optional[GroupTable] = None,
                       device: Optional[str] = None) -> Optional[str]:
    """Why `node` cannot be imported, or None when it can (its arguments assumed imported).
    With `device` ("cpu", "cuda:0"), an op without a kernel for that device is refused too
    (Note [kernels per device])."""
    if node.op != "call_function":
        return f"{node.op} {node.target} at node {node.name} is not an op symmflow can import"
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        return unsupported_reason(node.args[0], catalogue, groups, device)
    rule = _opmap.RULES_BY_OP.get(describe_target(node))
    if rule is not None and rule.torch_op.endswith("wait_tensor.default") and \
            isinstance(node.args[0], torch.fx.Node):
        # A wait goes where its collective goes: symmflow must not read an unfinished result.
        if unsupported_reason(node.args[0], catalogue, groups, device) is not None:
            return (f"{describe_target(node)} at node {node.name}: waits on {node.args[0].name}, "
                    "which stays in PyTorch")
    if _device_kind(device) == "cuda":  # Note [CPU scalars on a GPU] in _runner.py
        vals = [(a, node_val(a)) for a in node.all_input_nodes]
        tensors = [(a, v) for a, v in vals if isinstance(v, torch.Tensor)]
        if any(v.device.type == "cuda" for _, v in tensors):
            for a, v in tensors:
                if v.device.type == "cpu" and v.dim() > 0:
                    return (f"{describe_target(node)} at node {node.name}: its input {a.name} is "
                            "a cpu tensor beside cuda tensors")
    # A scratch program whose inputs stand for the node's arguments: the builder (the C++
    # registry) decides whether the node's call binds and types.
    table = groups or GroupTable.permissive_table()
    builder = _core.ProgramBuilder("support", table.world_size, device or "")
    tr = NodeTranslator(catalogue, table, builder)
    try:
        for a in node.all_input_nodes:
            val = node_val(a)
            if int_input(val):  # Note [ints that change every call]
                tr.values[a] = builder.add_input(a.name, "i64", [])
                continue
            if isinstance(val, (list, tuple)):  # a multi-result node: its items, by getitem
                tr.values[a] = tuple(
                    builder.add_input(f"{a.name}_{i}", *tensor_type(v, f"input {a.name}"))
                    if isinstance(v, torch.Tensor) else None for i, v in enumerate(val))
            else:
                tr.values[a] = builder.add_input(a.name, *tensor_type(val, f"input {a.name}"))
                if a.op == "placeholder":
                    tr.inputs[a] = tr.values[a]
        tr.translate(node)
    except UnsupportedGraph as e:
        return str(e)
    kind = _device_kind(device)
    if kind is not None:
        for op in tr.used_ops:
            backends = catalogue.ops.get(op, {}).get("backends", [])
            if kind not in backends:
                return (f"{describe_target(node)} at node {node.name}: {op} has no {kind} kernel "
                        f"(backends: {', '.join(backends) or 'none'})")
    return None


# Note [kernels per device]
# A node is supported exactly when it translates and every catalogue op it becomes has a kernel
# for the device the graph runs on that takes its arguments: the builder, made for that device,
# asks the registry (the op's kernels and their checks, Note [kernel checks] in
# src/ops/registry.hpp), and the catalogue's `backends` say it up front. So an op symmflow has
# only on the CPU, or a GPU kernel that takes floats given integers, is left to PyTorch in a GPU
# graph, named in the report ("has no cuda kernel"), instead of failing when the session is built
# or run.
